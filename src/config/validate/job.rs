//! A job: its credential, regions, steps, output, schedule and
//! concurrency, and every request it will send checked as filled in.
//! Apart from [`super`] because a job ties the other sections together.

use super::*;

impl Validator<'_> {
    pub(super) fn job(
        &self,
        name: String,
        raw: RawJob,
        credentials: &[Credential],
        endpoints: &[(String, EndpointSpec)],
    ) -> Result<Job> {
        let at = format!("jobs.{name}");
        self.job_name(&at, &name)?;
        let credential = self.job_credential(&at, &raw.credential, credentials)?;
        let cred = &credentials[credential];
        let keys = Keys {
            regions: raw.regions.is_some(),
            inputs: raw.inputs.is_some(),
            batched: raw.inputs.as_ref().is_some_and(|i| i.batch.is_some()),
        };
        if keys.regions && keys.inputs {
            return Err(self.err(
                format!("{at}.inputs"),
                "a job walks `regions` or `inputs`, not both: {key} stands for either",
            ));
        }
        let regions = self.job_regions(&at, raw.regions)?;
        let steps = self.steps(&at, raw.steps, cred, endpoints, keys)?;
        let inputs = raw
            .inputs
            .map(|i| self.inputs(&at, &name, i, &steps))
            .transpose()?;
        let once = self.once(&at, raw.once, inputs.is_some())?;
        self.hosts_from_inputs(&at, raw.hosts_from_inputs, inputs.is_some(), &steps)?;
        self.file_names_fit(&at, &name, &regions, steps.len())?;
        self.filled(&at, &name, &regions, inputs.as_ref(), &steps, cred)?;
        let (output, sqlite, postgres) = self.output(&at, raw.output)?;
        if let Some(sqlite) = &sqlite {
            self.rows_keyed(
                &at,
                "sqlite",
                &sqlite.items,
                &sqlite.key,
                &steps,
                keys.batched,
            )?;
        }
        if let Some(pg) = &postgres {
            self.rows_keyed(&at, "postgres", &pg.items, &pg.key, &steps, keys.batched)?;
        }
        let schedule = raw
            .schedule
            .as_deref()
            .map(|s| self.schedule(&format!("{at}.schedule"), s))
            .transpose()?;
        let concurrency = crate::config::concurrency::concurrency(&at, raw.concurrency.as_ref())
            .map_err(|(field, message)| self.err(field, message))?;
        let max_wait = match raw.max_wait {
            None => Duration::ZERO,
            Some(s) => self.max_wait(&format!("{at}.max_wait"), &s)?,
        };
        Ok(Job {
            name,
            credential,
            regions,
            inputs,
            once,
            steps,
            output,
            sqlite,
            postgres,
            schedule,
            concurrency,
            max_wait,
        })
    }

    /// A bound of waiting inside a run: a duration up to a day (a run that
    /// waits longer holds its job's lock past any timer's tick).
    pub(super) fn max_wait(&self, field: &str, s: &str) -> Result<Duration> {
        let d = self.duration(field, s)?;
        if d > Duration::from_secs(24 * 3600) {
            return Err(self.err(field, format!("{s} is out of range: at most 1d")));
        }
        Ok(d)
    }

    /// A job's name: a name, and none that page file names would misread.
    fn job_name(&self, at: &str, name: &str) -> Result<()> {
        self.name(at, name)?;
        if let Some(part) = run_like_part(name) {
            return Err(self.err(
                at,
                format!(
                    "'{name}' cannot be a job's name: its part '.{part}' reads as a run number in page file names (JOB.rRUN.REGION.sSTEP.pPAGE.json), so another job's pages could take the same names: rename it (say, to '{}')",
                    name.replacen(&format!(".{part}"), &format!(".run{}", &part[1..]), 1)
                ),
            ));
        }
        Ok(())
    }

    /// The index of the credential the job names, among those defined.
    fn job_credential(&self, at: &str, name: &str, credentials: &[Credential]) -> Result<usize> {
        credentials
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| {
                self.err(
                    format!("{at}.credential"),
                    format!(
                        "no credential named '{name}' (defined: {})",
                        list(credentials.iter().map(|c| &c.name))
                    ),
                )
            })
    }

    /// The job's regions (none when `regions` is left out), not an empty
    /// list and each once.
    fn job_regions(&self, at: &str, raw: Option<Vec<String>>) -> Result<Vec<String>> {
        let has_regions = raw.is_some();
        let regions = raw.unwrap_or_default();
        if has_regions && regions.is_empty() {
            return Err(self.err(
                format!("{at}.regions"),
                "an empty list: leave `regions` out for a job without regions",
            ));
        }
        self.distinct_regions(at, &regions)?;
        Ok(regions)
    }

    /// The steps, at least one, a fan-out taking its most values from the
    /// step before it.
    fn steps(
        &self,
        at: &str,
        raw: Vec<RawStep>,
        cred: &Credential,
        endpoints: &[(String, EndpointSpec)],
        keys: Keys,
    ) -> Result<Vec<Step>> {
        if raw.is_empty() {
            return Err(self.err(format!("{at}.steps"), "a job needs at least one step"));
        }
        if raw[0].for_each.is_some() {
            return Err(self.err(
                format!("{at}.steps[0].for_each"),
                "the first step has no previous step to take values from: for_each belongs on a later step",
            ));
        }
        let mut steps: Vec<Step> = Vec::new();
        for (i, s) in raw.into_iter().enumerate() {
            let mut step = self.step(&format!("{at}.steps[{i}]"), s, cred, endpoints, keys)?;
            if let (Some(_), Some(prev)) = (&step.for_each, steps.last())
                && prev.conditional.is_some()
            {
                return Err(self.err(
                    format!("{at}.steps[{}].conditional", i - 1),
                    "a page answered 304 has no values for the fan-out after it: \
                     conditional belongs on a step no for_each takes values from",
                ));
            }
            if let (Some(f), Some(prev)) = (step.for_each.as_mut(), steps.last()) {
                f.max_values = prev.max_requests().saturating_mul(u64::from(f.per_page));
            }
            steps.push(step);
        }
        Ok(steps)
    }

    /// `schedule: every DURATION`, for planning.
    fn schedule(&self, field: &str, s: &str) -> Result<Duration> {
        let d = s.trim().strip_prefix("every ").ok_or_else(|| {
            self.err(
                field,
                format!("'{s}': expected 'every DURATION', e.g. every 30m"),
            )
        })?;
        let every = self.positive_duration(field, d)?;
        self.at_most_max_window(field, d, every)?;
        Ok(every)
    }

    /// Every request of the job as it will be sent, placeholders filled in
    /// (the secret too, when it was read), for every region: the URL must
    /// parse and every header value be one HTTP allows, or the run would
    /// charge calls it can never send. The error names the field, never the
    /// value (it may hold the secret). An input's key and fields, read only
    /// by the run, are tried as a plain word (`XX`, `x`): what a value
    /// does is the run's to see, record by record.
    fn filled(
        &self,
        at: &str,
        job: &str,
        regions: &[String],
        inputs: Option<&Inputs>,
        steps: &[Step],
        cred: &Credential,
    ) -> Result<()> {
        let all = [String::from(if inputs.is_some() { "XX" } else { "" })];
        let regions = if regions.is_empty() {
            &all[..]
        } else {
            regions
        };
        let probe: InputFields = inputs
            .iter()
            .flat_map(|i| &i.fields)
            .map(|n| (n.clone(), crate::config::JsonText::string("x")))
            .collect();
        let probe = inputs.map(|_| &probe);
        for (i, step) in steps.iter().enumerate() {
            let at = format!("{at}.steps[{i}].request");
            for (r, region) in regions.iter().enumerate() {
                let fill = Fill {
                    region,
                    secret: &cred.secret,
                    job,
                    step: i,
                    page: 0,
                    // (a batch of inputs is tried as a plain word too)
                    batch: if inputs.is_some_and(|i| i.batch.is_some()) {
                        "XX"
                    } else {
                        ""
                    },
                    input: None,
                };
                let with = |t: &Template| {
                    let mut what = String::from("after substitution");
                    if t.uses(Placeholder::Region) || (t.uses_key() && inputs.is_none()) {
                        what.push_str(&format!(" for region {region}"));
                    }
                    if t.uses(Placeholder::Secret) {
                        what.push_str(&format!(" of the secret from {}", cred.secret_source));
                    }
                    what
                };
                // A template without {region} is the same for every region.
                if r == 0 || step.url.uses_key() {
                    let url = step.url.fill_url_with(&fill, probe).map_err(|m| {
                        self.err(format!("{at}.url"), format!("{}: {m}", with(&step.url)))
                    })?;
                    reqwest::Url::parse(&url).map_err(|e| {
                        self.err(
                            format!("{at}.url"),
                            format!("{}, it is not a URL: {e}", with(&step.url)),
                        )
                    })?;
                }
                for (k, v) in &step.headers {
                    if r > 0 && !v.uses_key() {
                        continue;
                    }
                    if reqwest::header::HeaderValue::from_str(&v.fill_with(&fill, probe)).is_err() {
                        return Err(self.err(
                            format!("{at}.headers.{k}"),
                            format!(
                                "{}, the value is not one HTTP allows in a header: it holds a control character (a line break, an escape, …); the request could never be sent",
                                with(v)
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Every page file name of the job, its temporary name included, fits
    /// in a file name: a long job name and a long region together may not.
    fn file_names_fit(&self, at: &str, job: &str, regions: &[String], steps: usize) -> Result<()> {
        use crate::page_name::{NAME_MAX, longest_name};
        let none = [String::new()];
        let regions = if regions.is_empty() {
            &none[..]
        } else {
            regions
        };
        for (i, r) in regions.iter().enumerate() {
            let len = longest_name(job, r, steps);
            if len > NAME_MAX {
                let (field, what) = if r.is_empty() {
                    (at.to_string(), format!("job '{job}'"))
                } else {
                    (
                        format!("{at}.regions[{i}]"),
                        format!("job '{job}' and region '{r}'"),
                    )
                };
                return Err(self.err(
                    field,
                    format!(
                        "{what} make page file names of up to {len} bytes (a page's temporary name, .JOB~JOB.rRUN.REGION.sSTEP.pPAGE.json~RANDOM.tmp), above the {NAME_MAX} a file name may take: shorten the job's name or the region"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Each of a job's regions valid, and none listed twice.
    fn distinct_regions(&self, at: &str, regions: &[String]) -> Result<()> {
        let mut seen = HashSet::with_capacity(regions.len());
        for (i, r) in regions.iter().enumerate() {
            self.region(&format!("{at}.regions[{i}]"), r)?;
            if !seen.insert(r.as_str()) {
                return Err(self.err(
                    format!("{at}.regions[{i}]"),
                    format!("region '{r}' appears twice"),
                ));
            }
        }
        Ok(())
    }
}

/// The first part of a job's name, after its first, that is `r` and digits
/// only (`A.r000001.X`'s `r000001`): such a name makes page names that
/// another job's may equal (job `A`, region `X.r000001.Y` and job
/// `A.r000001.X`, region `Y`, both `A.r000001.X.r000001.Y.…`). Without one,
/// a page name's job is the part before its first `.rDIGITS.`.
fn run_like_part(job: &str) -> Option<&str> {
    job.split('.').skip(1).find(|part| {
        part.strip_prefix('r')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::run_like_part;

    #[test]
    fn a_part_that_reads_as_a_run_number_is_found() {
        assert_eq!(run_like_part("A.r000001.X"), Some("r000001"));
        assert_eq!(run_like_part("feed.r2"), Some("r2"));
        for ok in [
            "r000001",
            "r1.feed",
            "feed.r2d2",
            "feed.run1",
            "feed.r",
            "feed.reddit",
        ] {
            assert_eq!(run_like_part(ok), None, "{ok}");
        }
    }
}
