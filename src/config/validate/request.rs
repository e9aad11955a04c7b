//! A step's request: its method, URL, query, headers and JSON body, each
//! a template checked for what the job can fill in. Apart from
//! [`super::step`] because a request is most of a step.

use super::*;

impl Validator<'_> {
    /// GET (the default), POST or PUT.
    pub(super) fn method(&self, at: &str, method: Option<&str>) -> Result<reqwest::Method> {
        match method.unwrap_or("GET") {
            m if m.eq_ignore_ascii_case("GET") => Ok(reqwest::Method::GET),
            m if m.eq_ignore_ascii_case("POST") => Ok(reqwest::Method::POST),
            m if m.eq_ignore_ascii_case("PUT") => Ok(reqwest::Method::PUT),
            m => Err(self.err(
                format!("{at}.request.method"),
                format!("'{m}': expected GET, POST or PUT"),
            )),
        }
    }

    /// A template of the request at `field`, its keys checked
    /// ([`Validator::key_use`]).
    fn template(&self, field: String, s: &str, keys: Keys) -> Result<Template> {
        let t = Template::parse(s).map_err(|m| self.err(&field, m))?;
        let names: Vec<&str> = t.input_names().collect();
        self.key_use(&field, &|p| t.uses(p), &names, keys)?;
        Ok(t)
    }

    /// `{region}` only in a job with regions, `{input.NAME}` only in one
    /// with inputs, `{key}` in either.
    fn key_use(
        &self,
        field: &str,
        uses: &dyn Fn(Placeholder) -> bool,
        input_names: &[&str],
        keys: Keys,
    ) -> Result<()> {
        if uses(Placeholder::Region) && !keys.regions {
            let hint = if keys.inputs {
                ": an input's key is {key}"
            } else {
                ""
            };
            return Err(self.err(
                field,
                format!("{{region}} is used but the job has no regions{hint}"),
            ));
        }
        if uses(Placeholder::Key) && !keys.regions && !keys.inputs {
            return Err(self.err(
                field,
                "{key} is used but the job has neither regions nor inputs",
            ));
        }
        if let Some(name) = input_names.first().filter(|_| !keys.inputs) {
            return Err(self.err(
                field,
                format!("{{input.{name}}} is used but the job has no inputs"),
            ));
        }
        Ok(())
    }

    /// The URL: a template that, filled in, is an http or https URL.
    pub(super) fn url(&self, at: &str, raw: &str, keys: Keys) -> Result<Template> {
        let field = format!("{at}.request.url");
        let url = self.template(field.clone(), raw, keys)?;
        let probe = url
            .fill_url(&Fill {
                region: "XX",
                secret: &Secret::new("x".into()),
                job: "job",
                step: 0,
                page: 0,
                batch: "",
                input: None,
            })
            .map_err(|m| self.err(&field, m))?;
        match reqwest::Url::parse(&probe) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(url),
            Ok(u) => Err(self.err(
                field,
                format!("scheme '{}': expected http or https", u.scheme()),
            )),
            Err(e) => Err(self.err(field, format!("not a URL: {e}"))),
        }
    }

    /// The query: each value a template (a number or a boolean as its text).
    pub(super) fn query(
        &self,
        at: &str,
        raw: OrderedMap<Value>,
        keys: Keys,
    ) -> Result<Vec<(String, Template)>> {
        let mut query = Vec::new();
        for (k, v) in raw.0 {
            let field = format!("{at}.request.query.{k}");
            let s = match &v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return Err(self.err(field, "expected a string, number or boolean")),
            };
            query.push((k, self.template(field, &s, keys)?));
        }
        Ok(query)
    }

    /// The headers: valid names, each value a template.
    pub(super) fn headers(
        &self,
        at: &str,
        raw: OrderedMap<String>,
        keys: Keys,
    ) -> Result<Vec<(String, Template)>> {
        let mut headers = Vec::new();
        for (k, v) in raw.0 {
            let field = format!("{at}.request.headers.{k}");
            if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
                return Err(self.err(field, "not a valid header name"));
            }
            headers.push((k, self.template(field, &v, keys)?));
        }
        Ok(headers)
    }

    /// The JSON body of a POST or PUT, its strings templates.
    pub(super) fn body(
        &self,
        at: &str,
        raw: &Value,
        method: &reqwest::Method,
        keys: Keys,
    ) -> Result<JsonTemplate> {
        let field = format!("{at}.request.body");
        if method == reqwest::Method::GET {
            return Err(self.err(
                &field,
                "a GET request carries no body: set method: POST or PUT",
            ));
        }
        let t =
            JsonTemplate::parse(raw).map_err(|(path, m)| self.err(format!("{field}{path}"), m))?;
        self.key_use(&field, &|p| t.uses(p), &t.input_names(), keys)?;
        Ok(t)
    }
}
