//! A job's step: its request (URL, query, method, headers, body), cost,
//! pagination and fan-out (`for_each`), checked against the job's
//! credential. Apart from [`super`] because a step is most of a job.

use super::*;

impl Validator<'_> {
    pub(super) fn step(
        &self,
        at: &str,
        raw: RawStep,
        cred: &Credential,
        endpoints: &[(String, EndpointSpec)],
        keys: Keys,
    ) -> Result<Step> {
        let spec = self.endpoint(at, &raw.endpoint, endpoints)?;
        let (cost, settle) = self.step_cost(at, &raw.endpoint, spec, cred)?;
        let not_modified = self.not_modified(
            &format!("endpoints.{}.cost", raw.endpoint),
            &spec.cost,
            &cost,
        )?;
        // In the order a reader meets them, so that the first mistake in
        // the file is the one reported.
        let request = raw.request;
        let method = self.method(at, request.method.as_deref())?;
        let url = self.url(at, &request.url, keys)?;
        let query = self.query(at, request.query, keys)?;
        let headers = self.headers(at, request.headers, keys)?;
        let paginate = raw
            .paginate
            .map(|p| self.paginate(&format!("{at}.paginate"), p))
            .transpose()?;
        let body = request
            .body
            .as_ref()
            .map(|v| self.body(at, v, &method, keys))
            .transpose()?;
        let for_each = raw
            .for_each
            .map(|f| self.for_each(&format!("{at}.for_each"), f))
            .transpose()?;
        self.batch_use(
            at,
            (for_each.is_some(), keys.batched),
            &url,
            &query,
            &headers,
            body.as_ref(),
        )?;
        if for_each.is_some() && paginate.is_some() {
            return Err(self.err(
                format!("{at}.paginate"),
                "a fan-out step (for_each) does not paginate: each batch is one request; \
                 page the previous step instead, or split the work into smaller batches",
            ));
        }
        let conditional = self.conditional(
            at,
            (raw.conditional, raw.on_not_modified.as_deref()),
            for_each.is_some(),
            &method,
        )?;
        if raw.incremental.is_some() && keys.batched {
            // (the value is kept per key: a batch's is its first input's,
            // and batches regroup when the file changes)
            return Err(self.err(
                format!("{at}.incremental"),
                "a job of inputs in batches has no one key per request to keep a value for: \
                 incremental needs one input a request (no `inputs.batch`)",
            ));
        }
        let incremental = raw
            .incremental
            .map(|i| self.incremental(&format!("{at}.incremental"), i, for_each.is_some()))
            .transpose()?;
        Ok(Step {
            conditional,
            incremental,
            not_modified,
            for_each,
            endpoint: raw.endpoint,
            cost,
            on_store_error: spec.on_store_error,
            method,
            url,
            query,
            headers,
            body,
            paginate,
            settle,
        })
    }

    /// `conditional: true` and `on_not_modified: continue | end`: on a
    /// GET that is no fan-out (a batch is no resource kept between runs).
    /// `continue` is the default (issue 36): a 304 on page 1 ends the walk
    /// rightly only on an API sorted newest first, and elsewhere it left
    /// changed pages after it stale; with `not_modified: 0` walking on
    /// costs nothing but 304s. `end` is the opt-in for such APIs.
    fn conditional(
        &self,
        at: &str,
        (on, on_not_modified): (Option<bool>, Option<&str>),
        fan_out: bool,
        method: &reqwest::Method,
    ) -> Result<Option<ConditionalRequests>> {
        let walk_on = match on_not_modified {
            None | Some("continue") => true,
            Some("end") => false,
            Some(other) => {
                return Err(self.err(
                    format!("{at}.on_not_modified"),
                    format!(
                        "'{other}': expected continue (the default) or end (for an API sorted newest first)"
                    ),
                ));
            }
        };
        if on != Some(true) {
            if on_not_modified.is_some() {
                return Err(self.err(
                    format!("{at}.on_not_modified"),
                    "only a step with conditional: true gets a 304",
                ));
            }
            return Ok(None);
        }
        let field = format!("{at}.conditional");
        if fan_out {
            return Err(self.err(
                field,
                "a fan-out step's batches change from run to run: conditional belongs on a paged step",
            ));
        }
        if *method != reqwest::Method::GET {
            return Err(self.err(
                field,
                format!(
                    "a {method} is not a read that can be answered 304: conditional needs a GET"
                ),
            ));
        }
        Ok(Some(ConditionalRequests { walk_on }))
    }

    /// `incremental: { from: POINTER, param: NAME, initial: VALUE }`.
    fn incremental(&self, at: &str, raw: RawIncremental, fan_out: bool) -> Result<Incremental> {
        if fan_out {
            return Err(self.err(
                at,
                "a fan-out step's batches are the previous step's values: incremental belongs on a paged step",
            ));
        }
        if !raw.from.starts_with('/') {
            return Err(self.err(
                format!("{at}.from"),
                format!(
                    "'{}' is not a JSON pointer: it starts with '/' (/*/updated_at)",
                    raw.from
                ),
            ));
        }
        if raw.param.is_empty() || raw.param.contains(['{', '}']) {
            return Err(self.err(format!("{at}.param"), "expected a query parameter's name"));
        }
        let initial = match raw.initial {
            None => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(_) => {
                return Err(self.err(
                    format!("{at}.initial"),
                    "expected a value to send (text, a time or a number)",
                ));
            }
        };
        Ok(Incremental {
            from: raw.from,
            param: raw.param,
            initial,
        })
    }

    /// The endpoint a step names, among those the file defines.
    fn endpoint<'e>(
        &self,
        at: &str,
        name: &str,
        endpoints: &'e [(String, EndpointSpec)],
    ) -> Result<&'e EndpointSpec> {
        endpoints
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, spec)| spec)
            .ok_or_else(|| {
                self.err(
                    format!("{at}.endpoint"),
                    format!(
                        "no endpoint named '{name}' (defined: {})",
                        list(endpoints.iter().map(|(n, _)| n))
                    ),
                )
            })
    }

    /// The endpoint's cost, resolved against the credential's pools: what
    /// each call charges, and the pools whose charge is an estimate settled
    /// from the response.
    fn step_cost(
        &self,
        at: &str,
        endpoint: &str,
        spec: &EndpointSpec,
        cred: &Credential,
    ) -> Result<(Vec<PoolCost>, Vec<SettledCost>)> {
        let cost_field = format!("endpoints.{endpoint}.cost");
        let (mut cost, mut settle) = (Vec::new(), Vec::new());
        for (pool, units, actual) in self.cost_shape(&cost_field, &spec.cost)? {
            let p = self.cost_pool(at, &cost_field, pool.as_deref(), cred)?;
            self.cost_fits(&cost_field, units, p, cred)?;
            cost.push(PoolCost {
                pool: p.clone(),
                units,
            });
            if let Some(actual) = actual {
                settle.push(SettledCost {
                    pool: p.name.clone(),
                    estimate: units,
                    actual,
                });
            }
        }
        Ok((cost, settle))
    }

    /// The credential's pool a cost names (`None`: a bare cost, which
    /// needs a credential with one pool).
    fn cost_pool<'c>(
        &self,
        at: &str,
        cost_field: &str,
        pool: Option<&str>,
        cred: &'c Credential,
    ) -> Result<&'c Pool> {
        match pool {
            None if cred.pools.len() == 1 => Ok(&cred.pools[0]),
            None => Err(self.err(
                cost_field,
                format!(
                    "a bare cost needs a credential with one pool; credential '{}' (used by {at}) has pools {}: name them",
                    cred.name,
                    list(cred.pools.iter().map(|p| &p.name))
                ),
            )),
            Some(name) => cred.pools.iter().find(|p| p.name == name).ok_or_else(|| {
                self.err(
                    format!("{cost_field}.{name}"),
                    format!(
                        "credential '{}' (used by {at}) has no pool '{name}' (pools: {})",
                        cred.name,
                        list(cred.pools.iter().map(|p| &p.name))
                    ),
                )
            }),
        }
    }

    /// A call's `units` fit in each window of pool `p`: else every run
    /// would stop at it, never admitted.
    fn cost_fits(&self, cost_field: &str, units: u64, p: &Pool, cred: &Credential) -> Result<()> {
        for w in &p.windows {
            if units > w.budget() {
                return Err(self.err(
                    format!("{cost_field}.{}", p.name),
                    format!(
                        "{units} units can never fit: the {} window of pool '{}' of credential '{}' has a budget of {} (limit {} - headroom {})",
                        fmt_duration(w.per),
                        p.name,
                        cred.name,
                        w.budget(),
                        w.limit,
                        w.headroom
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `for_each`, checked; its `max_values` is set by [`Self::job`], which
    /// knows the previous step.
    fn for_each(&self, at: &str, raw: RawForEach) -> Result<ForEach> {
        let field = |k: &str| format!("{at}.{k}");
        let from = raw.from.ok_or_else(|| {
            self.err(
                field("from"),
                "for_each needs from: the JSON pointer of the values in the previous step's pages (e.g. /items/*/id)",
            )
        })?;
        if !from.starts_with('/') {
            return Err(self.err(
                field("from"),
                format!("'{from}' is not a JSON pointer: it starts with / (e.g. /items/*/id)"),
            ));
        }
        let count = |k: &str, v: Option<i64>, max: i64| -> Result<Option<u32>> {
            match v {
                None => Ok(None),
                Some(n) if (1..=max).contains(&n) => Ok(Some(n as u32)),
                Some(n) => Err(self.err(field(k), format!("{n} is out of range: 1 to {max}"))),
            }
        };
        let batch = count("batch", raw.batch, 10_000)?.unwrap_or(1);
        let per_page = count("per_page", raw.per_page, 1_000_000)?.unwrap_or(batch);
        Ok(ForEach {
            from,
            batch,
            join: raw.join.unwrap_or_else(|| ",".into()),
            per_page,
            max_values: 0,
        })
    }

    /// `{batch}` is used in a step exactly when it fans out: without
    /// `for_each` it would always be empty, and a fan-out step that does
    /// not use it would send the same request for every batch. In a job
    /// whose inputs go in batches (`batched`), any step may use it (the
    /// batch's keys; a fan-out step's own values there).
    fn batch_use(
        &self,
        at: &str,
        (fans_out, batched): (bool, bool),
        url: &Template,
        query: &[(String, Template)],
        headers: &[(String, Template)],
        body: Option<&JsonTemplate>,
    ) -> Result<()> {
        let b = Placeholder::Batch;
        let mut users = Vec::new();
        if url.uses(b) {
            users.push(format!("{at}.request.url"));
        }
        users.extend(
            query
                .iter()
                .filter(|(_, t)| t.uses(b))
                .map(|(k, _)| format!("{at}.request.query.{k}")),
        );
        users.extend(
            headers
                .iter()
                .filter(|(_, t)| t.uses(b))
                .map(|(k, _)| format!("{at}.request.headers.{k}")),
        );
        if body.is_some_and(|t| t.uses(b)) {
            users.push(format!("{at}.request.body"));
        }
        match (fans_out, users.first()) {
            (false, Some(field)) if !batched => Err(self.err(
                field,
                "{batch} is used but the step has no for_each: add for_each: { from: POINTER } to fan out over the previous step's values",
            )),
            (true, None) => Err(self.err(
                format!("{at}.for_each"),
                "the step fans out but uses {batch} nowhere (url, query, headers or body): every batch would send the same request",
            )),
            _ => Ok(()),
        }
    }
}
