//! A job's `inputs` and `once`: the file (its kind from its extension, there
//! and readable), the key (a JSON pointer, or a CSV column found in the
//! header) and the `{input.NAME}` fields the templates use. Only a CSV
//! file's header is read here; the records are the run's to read.

use std::collections::BTreeSet;

use super::*;

impl Validator<'_> {
    /// `inputs: { file, key }` of the job at `at`, for its checked steps.
    pub(super) fn inputs(
        &self,
        at: &str,
        job: &str,
        raw: RawInputs,
        steps: &[Step],
    ) -> Result<Inputs> {
        let field = format!("{at}.inputs.file");
        if raw.file.trim().is_empty() {
            return Err(self.err(field, "must name a file (.txt, .jsonl or .csv)"));
        }
        let file = self.dir.join(&raw.file);
        let format = file
            .extension()
            .and_then(|e| e.to_str())
            .and_then(InputFormat::from_extension)
            .ok_or_else(|| {
                self.err(
                    &field,
                    format!(
                        "'{}': unknown extension: expected .txt (a key a line), .jsonl (a JSON object a line) or .csv (a header row, then records)",
                        raw.file
                    ),
                )
            })?;
        // (the type first: opening a FIFO waits for a writer, forever; a
        // device such as /dev/zero never ends)
        let opened = std::fs::metadata(&file)
            .and_then(|m| crate::config::regular_file(&m))
            .and_then(|()| std::fs::File::open(&file));
        let opened = opened
            .map_err(|e| self.err(&field, format!("{}: cannot read it: {e}", file.display())))?;
        let fields: Vec<String> = steps
            .iter()
            .flat_map(Step::input_names)
            .map(str::to_string)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let key_field = format!("{at}.inputs.key");
        let key = match (format, raw.key) {
            (InputFormat::Txt, None) => String::new(),
            (InputFormat::Txt, Some(_)) => {
                return Err(self.err(key_field, "a .txt file's key is its line: leave `key` out"));
            }
            (_, None) => {
                return Err(self.err(
                    key_field,
                    format!(
                        "missing: a .{} file needs `key` ({})",
                        format.name(),
                        match format {
                            InputFormat::Csv => "the name of a column of its header row",
                            _ => "a JSON pointer to each record's key, such as /id",
                        }
                    ),
                ));
            }
            (InputFormat::Jsonl, Some(k)) => {
                pointer_problem(&k).map_or(Ok(k), |why| Err(self.err(&key_field, why)))?
            }
            (InputFormat::Csv, Some(k)) => k,
        };
        let batch = self.inputs_batch(at, raw.batch, steps)?;
        if raw.join.as_deref() == Some("") {
            return Err(self.err(
                format!("{at}.inputs.join"),
                "is empty: the batch's keys would run together (a,b sent as ab); leave it out for ','",
            ));
        }
        let inputs = Inputs {
            file,
            format,
            key,
            fields,
            max_key: max_key(job, steps.len()),
            batch,
            join: raw.join.unwrap_or_else(|| ",".into()),
        };
        match format {
            InputFormat::Txt => self.no_fields(at, steps)?,
            InputFormat::Jsonl => {}
            InputFormat::Csv => self.csv_header(at, &inputs, opened, steps)?,
        }
        Ok(inputs)
    }

    /// `inputs.batch: N` (1 to [`MAX_BATCH`]): N inputs a request, their
    /// keys in `{batch}`. `{key}` and `{input.NAME}` would be one input's
    /// among N: refused. The first step sends the batch (`{batch}` there),
    /// or its requests would not carry the inputs at all.
    fn inputs_batch(&self, at: &str, batch: Option<i64>, steps: &[Step]) -> Result<Option<usize>> {
        let Some(n) = batch else { return Ok(None) };
        if !(1..=MAX_BATCH).contains(&n) {
            return Err(self.err(
                format!("{at}.inputs.batch"),
                format!("{n} is out of range: 1 to {MAX_BATCH} inputs a request"),
            ));
        }
        for (i, s) in steps.iter().enumerate() {
            if s.uses_key() {
                return Err(self.err(
                    format!("{at}.steps[{i}].request"),
                    "{key} or {input.NAME} in a job whose inputs go in batches (inputs.batch): \
                     a request carries several inputs, so one key or field is ambiguous; use {batch}, \
                     the batch's keys joined",
                ));
            }
        }
        if !steps[0].uses(Placeholder::Batch) {
            return Err(self.err(
                format!("{at}.steps[0].request"),
                "the job's inputs go in batches (inputs.batch) but its first step uses {batch} nowhere \
                 (url, query, headers or body): its requests would not carry the inputs",
            ));
        }
        Ok(Some(n as usize))
    }

    /// `once` (default false): only with `inputs`.
    pub(super) fn once(&self, at: &str, once: Option<bool>, has_inputs: bool) -> Result<bool> {
        match once {
            Some(true) if !has_inputs => Err(self.err(
                format!("{at}.once"),
                "once: true needs `inputs` (a file of inputs, each done once); a job with regions walks them every run",
            )),
            once => Ok(once.unwrap_or(false)),
        }
    }

    /// `{key}` in a URL's host lets a line of the inputs file choose the
    /// host that receives the secret: refused where the request carries
    /// it, unless the job says `hosts_from_inputs: true` (the file is the
    /// operator's own). (`{input.NAME}` never stands in a host: see
    /// `Template::fill_url`.)
    pub(super) fn hosts_from_inputs(
        &self,
        at: &str,
        allowed: Option<bool>,
        has_inputs: bool,
        steps: &[Step],
    ) -> Result<()> {
        if allowed.is_some() && !has_inputs {
            return Err(self.err(
                format!("{at}.hosts_from_inputs"),
                "hosts_from_inputs needs `inputs`: a job's own regions may always name hosts",
            ));
        }
        if !has_inputs || allowed == Some(true) {
            return Ok(());
        }
        for (i, s) in steps.iter().enumerate() {
            if s.url.key_in_host() && s.uses(Placeholder::Secret) {
                return Err(self.err(
                    format!("{at}.steps[{i}].request.url"),
                    "{key} is in the URL's host and the request carries {secret}: a line of the inputs file would choose the host that receives the key; set `hosts_from_inputs: true` on the job if every line of the file is yours to trust",
                ));
            }
        }
        Ok(())
    }

    /// A .txt record is its key alone: no `{input.NAME}` to fill.
    fn no_fields(&self, at: &str, steps: &[Step]) -> Result<()> {
        for (i, s) in steps.iter().enumerate() {
            if let Some(name) = s.input_names().first() {
                return Err(self.err(
                    format!("{at}.steps[{i}].request"),
                    format!(
                        "{{input.{name}}}: a .txt file's lines have no fields: use {{key}} for the line"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A CSV file's header row (the only part read): it names the key's
    /// column and every column the templates use, each once.
    fn csv_header(
        &self,
        at: &str,
        inputs: &Inputs,
        file: std::fs::File,
        steps: &[Step],
    ) -> Result<()> {
        let field = format!("{at}.inputs.file");
        let header = super::super::csv_header(file)
            .map_err(|e| self.err(&field, format!("{}: {e}", inputs.file.display())))?;
        let count = |name: &str| header.iter().filter(|h| *h == name).count();
        let problem = |name: &str| match count(name) {
            0 => Some("is not in its header row"),
            1 => None,
            _ => Some("appears more than once in its header row"),
        };
        if let Some(why) = problem(&inputs.key) {
            return Err(self.err(
                format!("{at}.inputs.key"),
                format!(
                    "column '{}' {why} ({}; columns: {})",
                    inputs.key,
                    inputs.file.display(),
                    header.join(", ")
                ),
            ));
        }
        for (i, s) in steps.iter().enumerate() {
            for name in s.input_names() {
                if let Some(why) = problem(name) {
                    return Err(self.err(
                        format!("{at}.steps[{i}].request"),
                        format!(
                            "{{input.{name}}}: column '{name}' {why} ({}; columns: {})",
                            inputs.file.display(),
                            header.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Why `p` is not a JSON pointer to a record's key (RFC 6901), if it is not.
fn pointer_problem(p: &str) -> Option<String> {
    if !p.starts_with('/') {
        return Some(format!(
            "'{p}' is not a JSON pointer to the key: it starts with '/' (such as /id or /meta/id)"
        ));
    }
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Some(format!(
                "'{p}' is not a JSON pointer: '~' is written ~0 and '/' inside a name ~1"
            ));
        }
    }
    None
}

/// The most bytes an input's key may take once percent-encoded (as a
/// region's, at most 150): what leaves every page file name of the job
/// within a file name's 255 bytes.
fn max_key(job: &str, steps: usize) -> usize {
    use crate::page_name::{NAME_MAX, longest_name};
    // (a name with a key is one with none plus the encoded key and a dot)
    NAME_MAX
        .saturating_sub(longest_name(job, "", steps) + 1)
        .min(150)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_pointers_are_checked() {
        assert_eq!(pointer_problem("/id"), None);
        assert_eq!(pointer_problem("/a~1b/~0c"), None);
        assert!(pointer_problem("id").unwrap().contains("starts with '/'"));
        assert!(pointer_problem("").unwrap().contains("starts with '/'"));
        assert!(pointer_problem("/a~2").unwrap().contains("~0"));
        assert!(pointer_problem("/a~").unwrap().contains("~0"));
    }

    #[test]
    fn a_key_leaves_page_names_within_a_file_name() {
        use crate::page_name::{NAME_MAX, encode_region, longest_name};
        assert_eq!(max_key("j", 1), 150);
        let job = "j".repeat(64);
        let max = max_key(&job, 3);
        assert!(max < 150);
        assert_eq!(longest_name(&job, &"k".repeat(max), 3), NAME_MAX);
        assert_eq!(encode_region(&"k".repeat(max)).len(), max);
    }
}
