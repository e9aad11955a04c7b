//! Where the Redis ledger connects: one server, a Redis Cluster, or the
//! master of a Sentinel-managed group; and the one connection type the
//! ledger talks through, whatever the topology.
//!
//! Store URLs:
//!
//! * `redis://[USER:PASSWORD@]HOST:PORT/DB`, `rediss://…` (TLS): one server.
//! * `redis+cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT,…` (seed nodes),
//!   `rediss+cluster://…` (TLS).
//! * `redis+sentinel://[USER:PASSWORD@]HOST:PORT,HOST:PORT,…/SERVICE[/DB][?replicas=N]`
//!   (sentinel addresses and the service name; the password is the master's),
//!   `rediss+sentinel://…` (TLS to the master and the sentinels).
//!
//! Under Sentinel a charge counts only once `replicas` replicas (default 1)
//! acknowledge it (`WAIT`): replication is asynchronous, and a failover
//! would otherwise lose the charges the old master took last, or that it
//! kept taking between the promotion of its replica and its own demotion.
//! A charge that is not acknowledged in time is checked with the
//! sentinels: if the server it went to is no longer the master, the charge
//! is sent again, under the same id, to the one they name; if it still is
//! (a master whose replicas are down, or a new master whose old one is not
//! yet its replica), the charge stands, with a warning. `replicas=0` skips
//! the wait: faster, but a failover can then lose the last charges.
//!
//! A `#insecure` fragment on a TLS URL skips certificate verification (for
//! self-signed test setups only).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, Pipeline, RedisError, RedisFuture, RedisResult,
    TlsMode, Value,
};

use super::{StoreError, redact_url};

/// How long one request to Redis may take before it counts as lost.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long connecting to Redis may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A parsed store URL.
#[derive(Clone, Debug, PartialEq)]
pub enum Topology {
    Single(String),
    /// Seed nodes, each a `redis://` or `rediss://` URL with the credentials.
    Cluster(Vec<String>),
    Sentinel {
        /// (host, port) of each sentinel.
        sentinels: Vec<(String, u16)>,
        service: String,
        tls: Option<TlsMode>,
        username: Option<String>,
        password: Option<String>,
        db: i64,
        /// Replicas that must acknowledge a charge.
        replicas: usize,
    },
}

/// How long a charge waits for its replicas' acknowledgement.
pub const WAIT_TIMEOUT: Duration = Duration::from_millis(1000);

/// Whether `url` names a Redis store of any topology.
pub fn is_redis_url(url: &str) -> bool {
    [
        "redis://",
        "rediss://",
        "redis+cluster://",
        "rediss+cluster://",
        "redis+sentinel://",
        "rediss+sentinel://",
    ]
    .iter()
    .any(|s| url.starts_with(s))
}

impl Topology {
    pub fn parse(url: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("invalid store URL '{}': {why}", redact_url(url));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let (tls, kind) = match scheme {
            "redis" | "rediss" => return Ok(Self::Single(url.to_string())),
            "redis+cluster" => (false, "cluster"),
            "rediss+cluster" => (true, "cluster"),
            "redis+sentinel" => (false, "sentinel"),
            "rediss+sentinel" => (true, "sentinel"),
            _ => return Err(bad("unknown scheme")),
        };
        let (rest, fragment) = match rest.split_once('#') {
            Some((r, f)) => (r, Some(f)),
            None => (rest, None),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let mut replicas = 1;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("replicas", n)) if kind == "sentinel" => {
                    replicas = n.parse().map_err(|_| bad("replicas is not a number"))?;
                }
                _ => return Err(bad(&format!("unknown option '{pair}'"))),
            }
        }
        let insecure = fragment == Some("insecure");
        let (authority, path) = match rest.split_once('/') {
            Some((a, p)) => (a, p),
            None => (rest, ""),
        };
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(u) => match u.split_once(':') {
                Some((user, pass)) => (
                    (!user.is_empty()).then(|| user.to_string()),
                    Some(pass.to_string()),
                ),
                None => (None, Some(u.to_string())),
            },
        };
        let mut nodes = Vec::new();
        for h in hosts.split(',').filter(|h| !h.is_empty()) {
            let (host, port) = h
                .rsplit_once(':')
                .ok_or_else(|| bad("each node needs HOST:PORT"))?;
            let port: u16 = port.parse().map_err(|_| bad("a port is not a number"))?;
            nodes.push((host.to_string(), port));
        }
        if nodes.is_empty() {
            return Err(bad("no nodes"));
        }
        if kind == "cluster" {
            let scheme = if tls { "rediss" } else { "redis" };
            let auth = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
            let frag = if insecure { "/#insecure" } else { "" };
            return Ok(Self::Cluster(
                nodes
                    .iter()
                    .map(|(h, p)| format!("{scheme}://{auth}{h}:{p}{frag}"))
                    .collect(),
            ));
        }
        let mut parts = path.split('/').filter(|s| !s.is_empty());
        let service = parts
            .next()
            .ok_or_else(|| bad("name the service: redis+sentinel://HOST:PORT,…/SERVICE"))?;
        let db = match parts.next() {
            Some(d) => d.parse().map_err(|_| bad("the database is not a number"))?,
            None => 0,
        };
        Ok(Self::Sentinel {
            sentinels: nodes,
            service: service.to_string(),
            tls: tls.then_some(if insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            }),
            username,
            password,
            db,
            replicas,
        })
    }

    /// Connect; `StoreError::Unavailable` when nothing answers in time.
    pub async fn connect(&self, shown: &str) -> Result<Conn, StoreError> {
        // The caller names the store; the error says what went wrong.
        let unavailable = StoreError::Unavailable;
        let connecting = async {
            Ok::<Conn, RedisError>(match self {
                Self::Single(url) => {
                    let client = redis::Client::open(url.as_str())?;
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(CONNECT_TIMEOUT))
                        .set_response_timeout(Some(RESPONSE_TIMEOUT))
                        .set_number_of_retries(1);
                    Conn::Single(ConnectionManager::new_with_config(client, config).await?)
                }
                Self::Cluster(nodes) => {
                    let client = ClusterClientBuilder::new(nodes.clone())
                        .connection_timeout(CONNECT_TIMEOUT)
                        .response_timeout(RESPONSE_TIMEOUT)
                        // None of its own: a resend must be flagged as one (see redis.rs).
                        .retries(0)
                        .build()?;
                    Conn::Cluster(client.get_async_connection().await?)
                }
                Self::Sentinel {
                    sentinels,
                    service,
                    tls,
                    username,
                    password,
                    db,
                    replicas,
                } => {
                    let addrs = sentinels.iter().map(|(h, p)| match tls {
                        Some(mode) => ConnectionAddr::TcpTls {
                            host: h.clone(),
                            port: *p,
                            insecure: *mode == TlsMode::Insecure,
                            tls_params: None,
                        },
                        None => ConnectionAddr::Tcp(h.clone(), *p),
                    });
                    let mut b = SentinelClientBuilder::new(
                        addrs,
                        service.clone(),
                        SentinelServerType::Master,
                    )?
                    .set_client_to_redis_db(*db);
                    if let Some(mode) = tls {
                        b = b
                            .set_client_to_redis_tls_mode(*mode)
                            .set_client_to_sentinel_tls_mode(*mode);
                    }
                    if let Some(u) = username {
                        b = b.set_client_to_redis_username(u);
                    }
                    if let Some(p) = password {
                        b = b.set_client_to_redis_password(p);
                    }
                    let conn = SentinelConn {
                        client: Arc::new(tokio::sync::Mutex::new(b.build()?)),
                        current: Arc::new(tokio::sync::Mutex::new(None)),
                        replicas: *replicas,
                    };
                    conn.get().await?;
                    Conn::Sentinel(conn)
                }
            })
        };
        tokio::time::timeout(CONNECT_TIMEOUT * 3, connecting)
            .await
            .map_err(|_| unavailable("connect timed out".into()))?
            .map_err(|e| {
                if e.kind() == redis::ErrorKind::InvalidClientConfig {
                    StoreError::BadLocation(format!("{shown}: {e}"))
                } else {
                    refused(&e)
                }
            })
    }
}

/// The connection the ledger talks through, whatever the topology.
#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConn),
}

/// The current master of a Sentinel group. After an error that may mean the
/// master moved (a dropped connection, a timeout, `READONLY` from a demoted
/// master), the next request asks the sentinels again.
#[derive(Clone)]
pub struct SentinelConn {
    client: Arc<tokio::sync::Mutex<SentinelClient>>,
    /// The master's connection, and its address.
    current: Arc<tokio::sync::Mutex<Option<(MultiplexedConnection, ConnectionAddr)>>>,
    replicas: usize,
}

impl SentinelConn {
    async fn get(&self) -> RedisResult<MultiplexedConnection> {
        Ok(self.get_with_addr().await?.0)
    }

    async fn get_with_addr(&self) -> RedisResult<(MultiplexedConnection, ConnectionAddr)> {
        let mut current = self.current.lock().await;
        if let Some(c) = current.as_ref() {
            return Ok(c.clone());
        }
        let client = self.client.lock().await.async_get_client().await?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let c = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let addr = client.get_connection_info().addr().clone();
        *current = Some((c.clone(), addr.clone()));
        Ok((c, addr))
    }

    /// The address the sentinels name as master now.
    async fn master_now(&self) -> RedisResult<ConnectionAddr> {
        let client = self.client.lock().await.async_get_client().await?;
        Ok(client.get_connection_info().addr().clone())
    }

    /// Run `script` and wait until `replicas` replicas have its writes, on
    /// one connection (WAIT covers the writes of the connection it runs on).
    pub async fn confirmed(&self, script: &redis::ScriptInvocation<'_>) -> RedisResult<Value> {
        let r = async {
            let (mut c, addr) = self.get_with_addr().await?;
            let reply: Value = script.invoke_async(&mut c).await?;
            if self.replicas > 0 {
                let acked: i64 = redis::cmd("WAIT")
                    .arg(self.replicas)
                    .arg(WAIT_TIMEOUT.as_millis() as u64)
                    .query_async(&mut c)
                    .await?;
                if (acked.max(0) as usize) < self.replicas {
                    if self.master_now().await? != addr {
                        // Written to a master that has been replaced: its
                        // writes will be dropped when it rejoins. Again, on
                        // the new one (same id: recorded once).
                        return Err(RedisError::from(std::io::Error::new(
                            std::io::ErrorKind::ConnectionReset,
                            "the master changed under the charge",
                        )));
                    }
                    tracing::warn!(
                        "the charge was acknowledged by {acked} of {} replica(s): a failover now could lose it",
                        self.replicas
                    );
                }
            }
            Ok(reply)
        }
        .await;
        self.after(r).await
    }

    async fn after<T>(&self, r: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &r
            && (is_transient(e)
                || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly))
        {
            *self.current.lock().await = None;
        }
        r
    }
}

/// An error after which the same request may succeed if sent again.
/// A store that is up but will not answer us (no password, a wrong one) is
/// as good as unreachable (exit 69); said with what to do about it.
pub fn refused(e: &RedisError) -> StoreError {
    if e.code() == Some("NOAUTH") {
        StoreError::Unavailable(format!(
            "{e} (the server wants a password: put it in the store URL, redis://:PASSWORD@HOST:PORT/DB)"
        ))
    } else {
        StoreError::Unavailable(e.to_string())
    }
}

pub fn is_transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_cluster_error()
        || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
            Self::Sentinel(s) => Box::pin(async move {
                let r = match s.get().await {
                    Ok(mut c) => c.req_packed_command(cmd).await,
                    Err(e) => Err(e),
                };
                s.after(r).await
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            Self::Sentinel(s) => Box::pin(async move {
                let r = match s.get().await {
                    Ok(mut c) => c.req_packed_commands(cmd, offset, count).await,
                    Err(e) => Err(e),
                };
                s.after(r).await
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
            Self::Sentinel(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_topologies() {
        assert_eq!(
            Topology::parse("redis://:pw@h:1/0").unwrap(),
            Topology::Single("redis://:pw@h:1/0".into())
        );
        assert_eq!(
            Topology::parse("rediss+cluster://:pw@a:1,b:2#insecure").unwrap(),
            Topology::Cluster(vec![
                "rediss://:pw@a:1/#insecure".into(),
                "rediss://:pw@b:2/#insecure".into()
            ])
        );
        assert_eq!(
            Topology::parse("redis+sentinel://u:pw@a:26379,b:26380/mymaster/2").unwrap(),
            Topology::Sentinel {
                sentinels: vec![("a".into(), 26379), ("b".into(), 26380)],
                service: "mymaster".into(),
                tls: None,
                username: Some("u".into()),
                password: Some("pw".into()),
                db: 2,
                replicas: 1,
            }
        );
        let e = Topology::parse("redis+sentinel://:secret@a:1").unwrap_err();
        assert!(
            e.contains("name the service") && !e.contains("secret"),
            "{e}"
        );
        assert!(Topology::parse("redis+cluster://a").is_err());
        assert!(matches!(
            Topology::parse("redis+sentinel://a:1/m?replicas=0").unwrap(),
            Topology::Sentinel { replicas: 0, .. }
        ));
        assert!(Topology::parse("redis+sentinel://a:1/m?colour=red").is_err());
    }
}
