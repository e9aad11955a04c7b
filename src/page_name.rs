//! Page files' names: `JOB.rRUN.REGION.sSTEP.pPAGE.json`, e.g.
//! `trending.r000042.US.s0.p000001.json`, the region percent-encoded. Here,
//! below both the configuration (which checks that every name a job can
//! make fits in a file name) and the run (which writes the pages), so
//! neither reaches into the other.

use crate::atomic_file::temp_name;

/// The most bytes a file name may take (Linux's `NAME_MAX`, and most
/// file systems').
pub const NAME_MAX: usize = 255;

/// Where a page goes, and what it is called.
pub struct PageName<'a> {
    pub job: &'a str,
    pub run: u64,
    pub region: &'a str,
    pub step: usize,
    pub page: u32,
}

impl PageName<'_> {
    pub fn file_name(&self) -> String {
        if self.region.is_empty() {
            format!(
                "{}.r{:06}.s{}.p{:06}.json",
                self.job, self.run, self.step, self.page
            )
        } else {
            format!(
                "{}.r{:06}.{}.s{}.p{:06}.json",
                self.job,
                self.run,
                encode_region(self.region),
                self.step,
                self.page
            )
        }
    }
}

/// The longest name a page of `job` in `region` takes on disk: its
/// temporary file's, for the job's last step, at the largest run and page
/// numbers the name format holds. Validation keeps it within [`NAME_MAX`],
/// or every run would charge a call and then fail to write its page.
pub fn longest_name(job: &str, region: &str, steps: usize) -> usize {
    let page = PageName {
        job,
        run: u64::MAX,
        region,
        step: steps.saturating_sub(1),
        page: u32::MAX,
    };
    temp_name(job, &page.file_name(), u64::MAX).len()
}

/// A region as a page file's name carries it: letters, digits, `.`, `_`
/// and `-` as they are, every other byte of its UTF-8 as `%XX`. A `/` can
/// then never make a folder, nor `%` or a space a name two regions share.
pub fn encode_region(region: &str) -> String {
    let mut out = String::with_capacity(region.len());
    for b in region.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A page file's name read back: the run, region (decoded), step and page
/// of a page of `job`, or `None` for any other file.
pub fn parse(job: &str, name: &str) -> Option<(u64, String, usize, u32)> {
    let rest = name.strip_prefix(job)?.strip_prefix(".r")?;
    let rest = rest.strip_suffix(".json")?;
    let (run, rest) = rest.split_once('.')?;
    let (rest, page) = rest.rsplit_once(".p")?;
    let (region, step) = match rest.rsplit_once(".s") {
        Some((region, step)) => (region, step),
        None => ("", rest.strip_prefix('s')?),
    };
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(run) || !all_digits(step) || !all_digits(page) {
        return None;
    }
    Some((
        run.parse().ok()?,
        decode_region(region)?,
        step.parse().ok()?,
        page.parse().ok()?,
    ))
}

/// The region [`encode_region`] encoded (`None`: not one of its names).
pub fn decode_region(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = encoded.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_and_sort_by_run() {
        let n = PageName {
            job: "trending",
            run: 42,
            region: "US",
            step: 0,
            page: 1,
        };
        assert_eq!(n.file_name(), "trending.r000042.US.s0.p000001.json");
        let n = PageName {
            region: "rust-lang/rust é%",
            ..n
        };
        assert_eq!(
            n.file_name(),
            "trending.r000042.rust-lang%2Frust%20%C3%A9%25.s0.p000001.json"
        );
        let n = PageName { region: "", ..n };
        assert_eq!(n.file_name(), "trending.r000042.s0.p000001.json");
    }

    #[test]
    fn names_sort_in_page_order() {
        let names: Vec<String> = (0..12)
            .map(|page| {
                PageName {
                    job: "feed",
                    run: 1,
                    region: "US",
                    step: 0,
                    page,
                }
                .file_name()
            })
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names, "p10 sorted before p2");
    }

    #[test]
    fn a_page_name_reads_back_as_its_run_region_step_and_page() {
        for region in ["US", "", "rust-lang/rust", "a.s1.p2", "日本 x%"] {
            let name = PageName {
                job: "list",
                run: 42,
                region,
                step: 3,
                page: 7,
            }
            .file_name();
            assert_eq!(
                parse("list", &name),
                Some((42, region.to_string(), 3, 7)),
                "{name}"
            );
        }
        assert_eq!(parse("list", "other.r000001.US.s0.p000000.json"), None);
        assert_eq!(parse("list", ".list~r000001.US.s0.p000000.json.tmp"), None);
        assert_eq!(parse("li", "list.r000001.US.s0.p000000.json"), None);
    }
}
