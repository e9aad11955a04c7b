//! A configuration built in code, rendered as the YAML a test writes to
//! `portion.yaml`: `Config::new(store).credential(…).endpoint(…).job(…)`.
//! A test then says only what it is about; the header (credentials, pools,
//! endpoints) is not copied from file to file. Values are YAML text, given
//! as the file would hold them (`"{ limit: 5, per: 1h }"`, `"every 1h"`),
//! and rendered one key a line (an endpoint as one flow map), in the
//! order they were given, so a test may still edit the text (`replacen`)
//! where the YAML itself is the point.

use std::fmt;

/// The whole file: top-level settings, then credentials, endpoints, jobs.
#[derive(Clone, Debug)]
pub struct Config {
    top: Vec<(String, String)>,
    credentials: Vec<Credential>,
    endpoints: Vec<Endpoint>,
    jobs: Vec<String>,
}

impl Config {
    /// A configuration on `store` (a `store:` value), with nothing else.
    pub fn new(store: &str) -> Self {
        Config {
            top: vec![("store".into(), store.into())],
            credentials: vec![],
            endpoints: vec![],
            jobs: vec![],
        }
    }

    /// Any top-level key (`lock_ttl`, `http`, …), as YAML text.
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.top.push((key.into(), value.into()));
        self
    }

    pub fn lock_ttl(self, ttl: &str) -> Self {
        self.set("lock_ttl", ttl)
    }

    /// The `http:` settings, a flow map such as `{ timeout: 5s }`.
    pub fn http(self, settings: &str) -> Self {
        self.set("http", settings)
    }

    pub fn credential(mut self, credential: Credential) -> Self {
        self.credentials.push(credential);
        self
    }

    /// Endpoint `name` costing `cost` (YAML text: `1`, `{ units: 1 }`).
    pub fn endpoint(self, name: &str, cost: &str) -> Self {
        self.endpoint_with(Endpoint::new(name, cost))
    }

    pub fn endpoint_with(mut self, endpoint: Endpoint) -> Self {
        self.endpoints.push(endpoint);
        self
    }

    pub fn job(mut self, job: Job) -> Self {
        self.jobs.push(job.to_string());
        self
    }

    /// Jobs already rendered as YAML blocks (each ending in a newline).
    pub fn jobs_text(mut self, blocks: &str) -> Self {
        self.jobs.push(blocks.into());
        self
    }

    pub fn render(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (key, value) in &self.top {
            writeln!(f, "{key}: {value}")?;
        }
        if self.credentials.is_empty() {
            writeln!(f, "credentials: {{}}")?;
        } else {
            writeln!(f, "credentials:")?;
        }
        for c in &self.credentials {
            write!(f, "{c}")?;
        }
        if !self.endpoints.is_empty() {
            writeln!(f, "endpoints:")?;
        }
        for e in &self.endpoints {
            write!(f, "{e}")?;
        }
        if !self.jobs.is_empty() {
            writeln!(f, "jobs:")?;
        }
        for j in &self.jobs {
            write!(f, "{j}")?;
        }
        Ok(())
    }
}

/// A window of `limit` units `per` a duration, as a pool lists it.
pub fn limit(limit: u64, per: &str) -> String {
    format!("{{ limit: {limit}, per: {per} }}")
}

/// One credential: its secret (the `key` file unless said), its pools.
#[derive(Clone, Debug)]
pub struct Credential {
    name: String,
    fields: Vec<(String, String)>,
    pools: Vec<(String, Vec<String>)>,
}

impl Credential {
    /// Credential `name`, its secret read from the deployment's `key` file.
    pub fn new(name: &str) -> Self {
        Credential {
            name: name.into(),
            fields: vec![("secret".into(), "{ file: key }".into())],
            pools: vec![],
        }
    }

    /// The `secret:` source, YAML text such as `{ env: API_KEY }`.
    pub fn secret(mut self, source: &str) -> Self {
        self.fields[0].1 = source.into();
        self
    }

    /// Any other field of the credential, as YAML text (`shares`,
    /// `lend_after`, `mode`).
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.fields.push((key.into(), value.into()));
        self
    }

    /// Pool `name` with `windows`, each a flow map (see [`limit`]).
    pub fn pool<W: AsRef<str>>(mut self, name: &str, windows: &[W]) -> Self {
        let windows = windows.iter().map(|w| w.as_ref().to_string()).collect();
        self.pools.push((name.into(), windows));
        self
    }
}

impl fmt::Display for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "  {}:", self.name)?;
        for (key, value) in &self.fields {
            writeln!(f, "    {key}: {value}")?;
        }
        writeln!(f, "    pools:")?;
        for (name, windows) in &self.pools {
            writeln!(f, "      {name}:")?;
            for w in windows {
                writeln!(f, "        - {w}")?;
            }
        }
        Ok(())
    }
}

/// An endpoint: its cost and any other settings, rendered as one flow map.
#[derive(Clone, Debug)]
pub struct Endpoint {
    name: String,
    fields: Vec<(String, String)>,
}

impl Endpoint {
    pub fn new(name: &str, cost: &str) -> Self {
        Endpoint {
            name: name.into(),
            fields: vec![("cost".into(), cost.into())],
        }
    }

    /// Any other key (`on_store_error`, …), as YAML text.
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.fields.push((key.into(), value.into()));
        self
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields: Vec<String> = self
            .fields
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        writeln!(f, "  {}: {{ {} }}", self.name, fields.join(", "))
    }
}

/// A job: its credential, settings in the order given, steps, and its
/// output, `out/NAME`.
#[derive(Clone, Debug)]
pub struct Job {
    name: String,
    fields: Vec<(String, String)>,
    steps: Vec<Step>,
    output: String,
}

impl Job {
    /// Job `name` spending credential `credential`.
    pub fn new(name: &str, credential: &str) -> Self {
        Job {
            name: name.into(),
            fields: vec![("credential".into(), credential.into())],
            steps: vec![],
            output: format!("out/{name}"),
        }
    }

    /// Any key of the job (`schedule`, `concurrency`, …), as YAML text.
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.fields.push((key.into(), value.into()));
        self
    }

    /// Its `output`, as YAML text (default `out/NAME`).
    pub fn output(mut self, output: &str) -> Self {
        self.output = output.into();
        self
    }

    pub fn regions(self, regions: &[&str]) -> Self {
        self.set("regions", &format!("[{}]", regions.join(", ")))
    }

    pub fn step(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }
}

impl fmt::Display for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "  {}:", self.name)?;
        for (key, value) in &self.fields {
            writeln!(f, "    {key}: {value}")?;
        }
        writeln!(f, "    steps:")?;
        for s in &self.steps {
            write!(f, "{s}")?;
        }
        writeln!(f, "    output: {}", self.output)
    }
}

/// A step: its endpoint, its request (one key a line), then its other
/// settings (`paginate`, `for_each`, …).
#[derive(Clone, Debug)]
pub struct Step {
    endpoint: String,
    request: Vec<(String, String)>,
    fields: Vec<(String, String)>,
}

impl Step {
    pub fn new(endpoint: &str) -> Self {
        Step {
            endpoint: endpoint.into(),
            request: vec![],
            fields: vec![],
        }
    }

    /// A key of the request (`url`, `query`, `headers`, `method`, `body`),
    /// as YAML text: a URL with `{…}` in it must be quoted by the caller.
    pub fn request(mut self, key: &str, value: &str) -> Self {
        self.request.push((key.into(), value.into()));
        self
    }

    pub fn url(self, url: &str) -> Self {
        self.request("url", url)
    }

    pub fn query(self, query: &str) -> Self {
        self.request("query", query)
    }

    /// Any other key of the step, as YAML text.
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.fields.push((key.into(), value.into()));
        self
    }

    pub fn paginate(self, how: &str) -> Self {
        self.set("paginate", how)
    }

    pub fn for_each(self, how: &str) -> Self {
        self.set("for_each", how)
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "      - endpoint: {}", self.endpoint)?;
        writeln!(f, "        request:")?;
        for (key, value) in &self.request {
            writeln!(f, "          {key}: {value}")?;
        }
        for (key, value) in &self.fields {
            writeln!(f, "        {key}: {value}")?;
        }
        Ok(())
    }
}
