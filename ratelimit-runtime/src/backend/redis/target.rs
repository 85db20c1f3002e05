//! Where Redis runs: the URL forms [`Limiter::redis`](crate::Limiter::redis) takes, read
//! into a [`Target`].
//!
//! Each server's part is read by redis-rs from a one-server URL (`redis://[user:pass@]host:port/db`),
//! so user names, passwords, ports and databases mean the same in every form. Messages quote
//! the scheme and hosts back, never the user part: it may hold a password.

use redis::{ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

use crate::ConfigError;

/// The URL forms, for error messages.
pub(super) const ACCEPTED_URLS: &str = "redis://[[user]:password@]host[:port][/db], \
     rediss://… (TLS), redis+cluster://host:port[,host:port…] (rediss+cluster:// for TLS), \
     redis+sentinel://[[user]:password@]host:port[,host:port…]/master_name[/db] \
     (rediss+sentinel:// for TLS), or unix:///path/to/redis.sock[?db=N]";

/// What a Redis URL names.
#[derive(Clone)]
pub(super) struct Target {
    pub layout: Layout,
    /// Whether every connection (to servers and sentinels) speaks TLS.
    pub tls: bool,
    /// Where the servers are, without credentials: what messages name.
    pub shown: Box<str>,
}

#[derive(Clone)]
pub(super) enum Layout {
    /// One server.
    Single(ConnectionInfo),
    /// A Redis Cluster, found from these seed nodes.
    Cluster(Vec<ConnectionInfo>),
    /// The master `master_name` that these sentinels watch; `master` holds the credentials
    /// and database for it (the sentinels are asked without credentials, and with the same
    /// ones if they require them).
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master_name: Box<str>,
        master: RedisConnectionInfo,
    },
}

/// Reads `url`; every error names what is wrong and the accepted forms.
pub(super) fn parse(url: &str) -> Result<Target, ConfigError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid("it has no scheme"));
    };
    match scheme {
        "redis" | "valkey" => single(url, false),
        "unix" | "redis+unix" | "valkey+unix" => single(url, false),
        "rediss" | "valkeys" | "rediss+cluster" | "rediss+sentinel" if !cfg!(feature = "tls") => {
            Err(ConfigError::new(format!(
                "{scheme}:// needs the `tls` feature of redis-ratelimit; enable it in Cargo.toml: \
                 redis-ratelimit = {{ version = \"…\", features = [\"tls\"] }}"
            )))
        }
        "rediss" | "valkeys" => single(&format!("redis://{rest}"), true),
        "redis+cluster" | "rediss+cluster" => cluster(rest, scheme == "rediss+cluster"),
        "redis+sentinel" | "rediss+sentinel" => sentinel(rest, scheme == "rediss+sentinel"),
        other if is_scheme(other) => Err(ConfigError::new(format!(
            "unsupported Redis URL scheme `{other}://`; expected {ACCEPTED_URLS}"
        ))),
        _ => Err(invalid("its scheme is malformed")),
    }
}

fn single(url: &str, tls: bool) -> Result<Target, ConfigError> {
    let info = server(url)?;
    Ok(Target {
        shown: format!("Redis at {}", info.addr()).into(),
        layout: Layout::Single(info),
        tls,
    })
}

fn cluster(rest: &str, tls: bool) -> Result<Target, ConfigError> {
    let parts = Parts::split(rest)?;
    if !matches!(parts.path, "" | "/" | "/0") {
        return Err(invalid(
            "a Redis Cluster has only database 0, so a cluster URL has no path",
        ));
    }
    let seeds = parts.servers("")?;
    Ok(Target {
        shown: format!("the Redis Cluster at {}", parts.hosts.join(",")).into(),
        layout: Layout::Cluster(seeds),
        tls,
    })
}

fn sentinel(rest: &str, tls: bool) -> Result<Target, ConfigError> {
    let parts = Parts::split(rest)?;
    let mut path = parts.path.trim_start_matches('/').splitn(2, '/');
    let master_name = path.next().unwrap_or_default();
    if master_name.is_empty() {
        return Err(invalid(
            "a sentinel URL names the master after the hosts: \
             redis+sentinel://host:port[,host:port…]/master_name[/db]",
        ));
    }
    let db = path.next().unwrap_or_default();
    let master = server(&format!("redis://{}{}/{db}", parts.user, parts.hosts[0]))?
        .redis_settings()
        .clone();
    // The credentials are the master's; sentinels are asked without, at first.
    let sentinels = Parts {
        user: "",
        ..parts.clone()
    }
    .servers("")?;
    Ok(Target {
        shown: format!(
            "master `{master_name}` (sentinels {})",
            parts.hosts.join(",")
        )
        .into(),
        layout: Layout::Sentinel {
            sentinels,
            master_name: master_name.into(),
            master,
        },
        tls,
    })
}

/// A many-host URL after its scheme: `[user@]host:port[,host:port…][/path]`.
#[derive(Clone)]
struct Parts<'a> {
    /// `user:password@`, or empty.
    user: &'a str,
    hosts: Vec<&'a str>,
    path: &'a str,
}

impl<'a> Parts<'a> {
    fn split(rest: &'a str) -> Result<Parts<'a>, ConfigError> {
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((user, hosts)) => (&rest[..user.len() + 1], hosts),
            None => ("", authority),
        };
        let hosts: Vec<&str> = hosts.split(',').collect();
        if hosts.iter().any(|host| host.is_empty()) {
            return Err(invalid("it lists an empty host"));
        }
        Ok(Parts { user, hosts, path })
    }

    /// Each host as a server, with this URL's credentials and database `db`.
    fn servers(&self, db: &str) -> Result<Vec<ConnectionInfo>, ConfigError> {
        self.hosts
            .iter()
            .map(|host| server(&format!("redis://{}{host}/{db}", self.user)))
            .collect()
    }
}

/// One server, read by redis-rs, whose messages name the part that is wrong, never the URL.
fn server(url: &str) -> Result<ConnectionInfo, ConfigError> {
    url.into_connection_info()
        .map_err(|e| invalid(&e.to_string()))
}

fn invalid(why: &str) -> ConfigError {
    ConfigError::new(format!(
        "invalid Redis URL ({why}); expected {ACCEPTED_URLS}"
    ))
}

/// Whether `s` looks like a URL scheme, and so is safe to quote back (it holds no password).
fn is_scheme(s: &str) -> bool {
    s.len() <= 16
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_error(url: &str) -> String {
        parse(url).err().expect("rejected").to_string()
    }

    #[test]
    fn accepts_the_documented_url_forms() {
        for url in [
            "redis://127.0.0.1",
            "redis://127.0.0.1:6380/2",
            "redis://:secret@localhost:6379",
            "redis://user:secret@localhost:6379/0",
            "unix:///run/redis/redis.sock",
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7000",
            "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster",
        ] {
            assert!(parse(url).is_ok(), "{url}");
        }
    }

    const TLS_URLS: [&str; 3] = [
        "rediss://user:secret@redis.example.com:6380/1",
        "rediss+cluster://:secret@10.0.0.1:7000/",
        "rediss+sentinel://user:secret@127.0.0.1:26379/mymaster/3",
    ];

    #[cfg(feature = "tls")]
    #[test]
    fn accepts_the_tls_forms() {
        for url in TLS_URLS {
            assert!(parse(url).unwrap().tls, "{url}");
        }
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_forms_name_the_feature_they_need() {
        for url in TLS_URLS {
            let message = config_error(url);
            let scheme = url.split_once("://").unwrap().0;
            assert!(
                message.starts_with(&format!(
                    "{scheme}:// needs the `tls` feature of redis-ratelimit"
                )),
                "{message}"
            );
            assert!(!message.contains("secret"), "{message}");
        }
    }

    #[test]
    fn each_form_is_its_topology() {
        let cluster = parse("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001").unwrap();
        let Layout::Cluster(seeds) = &cluster.layout else {
            panic!("not a cluster")
        };
        assert!(!cluster.tls);
        assert_eq!(seeds.len(), 2);
        assert_eq!(seeds[1].addr().to_string(), "10.0.0.2:7001");
        assert_eq!(seeds[1].redis_settings().password(), Some("pw"));
        assert_eq!(
            &*cluster.shown,
            "the Redis Cluster at 10.0.0.1:7000,10.0.0.2:7001"
        );

        let sentinel = parse("redis+sentinel://u:pw@127.0.0.1:26379,h:26380/main/3").unwrap();
        let Layout::Sentinel {
            sentinels,
            master_name,
            master,
        } = &sentinel.layout
        else {
            panic!("not a sentinel")
        };
        assert_eq!(sentinels.len(), 2);
        assert_eq!(sentinels[0].redis_settings().password(), None);
        assert_eq!(&**master_name, "main");
        assert_eq!(
            (master.username(), master.password()),
            (Some("u"), Some("pw"))
        );
        assert_eq!(master.db(), 3);
    }

    #[test]
    fn other_schemes_are_rejected_with_the_accepted_forms() {
        let message = config_error("http://user:hunter2@127.0.0.1:6379");
        assert!(message.contains("`http://`"), "{message}");
        for form in [
            "redis://",
            "rediss://",
            "redis+cluster://",
            "redis+sentinel://",
            "unix://",
        ] {
            assert!(message.contains(form), "{message}");
        }
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn topology_mistakes_say_what_is_wrong() {
        let message = config_error("redis+cluster://:hunter2@10.0.0.1:7000/2");
        assert!(message.contains("only database 0"), "{message}");
        let message = config_error("redis+sentinel://:hunter2@10.0.0.1:26379");
        assert!(message.contains("master_name"), "{message}");
        let message = config_error("redis+cluster://:hunter2@10.0.0.1:7000,,h:1");
        assert!(message.contains("empty host"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn malformed_urls_never_print_the_password() {
        for url in [
            "127.0.0.1:6379",
            "hunter2",
            "redis://:hunter2@127.0.0.1:6379/notadb",
            "redis://:hunter2@0.0.0.0:6379",
            ":hunter2@host://x",
            "redis+sentinel://:hunter2@h:notaport/m",
            "redis+cluster://:hunter2@h:notaport",
        ] {
            let message = config_error(url);
            assert!(message.contains("redis://"), "{message}");
            assert!(!message.contains("hunter2"), "{message}");
        }
    }
}
