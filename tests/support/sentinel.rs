//! A master, its replica and three Sentinels on loopback, to test discovering the master
//! through Sentinel and living through a failover.

use super::tls::write_certificates;
use super::{
    connect, query, replica_in_sync, wait_until, PortReservation, PortTaken, RedisProcess,
    ScratchDir, Topology,
};
use std::collections::HashMap;
use std::time::Duration;

/// How long Sentinel may take to discover the topology, or to carry out a failover.
const SETTLE: Duration = Duration::from_secs(30);

/// A master, a replica and 3 sentinels; all killed on drop, their files removed.
pub struct RedisSentinels {
    /// The two data nodes; which one is master changes with failovers.
    data: [RedisProcess; 2],
    sentinels: Vec<RedisProcess>,
    tls: Option<Tls>,
    _dir: ScratchDir,
    _ports: Vec<PortReservation>,
}

/// The TLS side of a set started with TLS.
struct Tls {
    /// Each data node's plain port by its TLS port (the one the sentinels name).
    plain_of: HashMap<u16, u16>,
    sentinel_ports: Vec<u16>,
    ca_pem: String,
}

/// A master, one replica of it, and 3 sentinels monitoring it with quorum 2 (down after
/// 1 s, failover timeout 5 s). Started when the replica is in sync and every sentinel
/// reports the master, knows the 2 other sentinels, and has the replica as a healthy
/// candidate for promotion (until then SENTINEL FAILOVER answers -NOGOODSLAVE).
///
/// With TLS, everything speaks it (clients, replication, sentinels to data nodes), and the
/// ports this API returns are the plain ones every process keeps. See
/// [`tls_url`](RedisSentinels::tls_url) and [`ca_pem`](RedisSentinels::ca_pem).
impl Topology for RedisSentinels {
    fn try_start(tls: bool) -> Result<RedisSentinels, PortTaken> {
        let (reserved, ports) = PortReservation::many(if tls { 10 } else { 5 }, 0);
        let (master, replica) = (ports[0], ports[1]);
        let dir = ScratchDir::new(&format!("sentinel-{master}"));
        let ca_pem = tls.then(|| write_certificates(&dir));
        let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
        // `--tls-port` and the rest, as (name, value) for a command line or a conf file.
        let tls_settings = |port: u16| {
            [
                ("tls-port", port.to_string()),
                ("tls-cert-file", file("server.crt")),
                ("tls-key-file", file("server.key")),
                ("tls-ca-cert-file", file("ca.crt")),
                ("tls-auth-clients", "no".into()),
                ("tls-replication", "yes".into()),
            ]
        };
        // The ports the sentinels monitor and name: the TLS ones in a TLS set.
        let (named_master, named_replica) = if tls {
            (ports[5], ports[6])
        } else {
            (master, replica)
        };
        let data_args = |port: u16, named: u16| {
            // Either node may have to serve a full sync (the other is promoted later): at once.
            let mut args = vec!["--repl-diskless-sync-delay".to_owned(), "0".to_owned()];
            if port == replica {
                args.extend(["--replicaof", "127.0.0.1"].map(String::from));
                args.push(named_master.to_string());
            }
            if tls {
                let settings = tls_settings(named).into_iter();
                args.extend(settings.flat_map(|(name, value)| [format!("--{name}"), value]));
            }
            args
        };
        let mut data = [(master, named_master), (replica, named_replica)].map(|(port, named)| {
            let args = data_args(port, named);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            RedisProcess::spawn_node(port, &dir.join(port.to_string()), &args)
        });
        data.iter_mut()
            .try_for_each(RedisProcess::wait_until_ready)?;
        // Sentinels learn replicas from the master's INFO: their first INFO comes as soon as
        // they connect, the next one 10 s later. Start them once the master lists the replica.
        wait_until("the replica to sync with the master", SETTLE, || {
            replica_in_sync(replica)
        });
        let mut sentinels: Vec<RedisProcess> = (2..5)
            .map(|i| {
                let port = ports[i];
                let conf = dir.join(format!("sentinel-{port}.conf"));
                let name = Self::MASTER_NAME;
                let mut text = format!(
                    "port {port}\nbind 127.0.0.1\n\
                     sentinel monitor {name} 127.0.0.1 {named_master} 2\n\
                     sentinel down-after-milliseconds {name} 1000\n\
                     sentinel failover-timeout {name} 5000\n\
                     sentinel parallel-syncs {name} 1\n"
                );
                if tls {
                    for (name, value) in tls_settings(ports[i + 5]) {
                        text += &format!("{name} {value}\n");
                    }
                }
                std::fs::write(&conf, text)
                    .unwrap_or_else(|e| panic!("write {}: {e}", conf.display()));
                let log = dir.join(format!("sentinel-{port}.log"));
                RedisProcess::spawn(port, log, [conf.as_os_str(), "--sentinel".as_ref()])
            })
            .collect();
        sentinels
            .iter_mut()
            .try_for_each(RedisProcess::wait_until_ready)?;
        let topology = RedisSentinels {
            data,
            sentinels,
            tls: ca_pem.map(|ca_pem| Tls {
                plain_of: HashMap::from([(named_master, master), (named_replica, replica)]),
                sentinel_ports: ports[7..].to_vec(),
                ca_pem,
            }),
            _dir: dir,
            _ports: reserved,
        };
        for sentinel in topology.sentinel_ports() {
            wait_until(
                &format!(
                    "sentinel {sentinel} to know master {named_master}, replica {named_replica}, \
                     2 sentinels"
                ),
                SETTLE,
                || sentinel_ready(sentinel, named_master, named_replica),
            );
        }
        Ok(topology)
    }
}

impl RedisSentinels {
    pub const MASTER_NAME: &'static str = "mymaster";

    /// `rediss+sentinel://127.0.0.1:t1,127.0.0.1:t2,127.0.0.1:t3/mymaster`: the sentinels'
    /// TLS ports. Only for [`start_tls`](Self::start_tls).
    pub fn tls_url(&self) -> String {
        let tls = self.tls.as_ref().expect("a set from start_tls");
        let sentinels: Vec<String> = tls
            .sentinel_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!(
            "rediss+sentinel://{}/{}",
            sentinels.join(","),
            Self::MASTER_NAME
        )
    }

    /// The PEM of the CA that signed every process's certificate. Only for
    /// [`start_tls`](Self::start_tls).
    pub fn ca_pem(&self) -> Vec<u8> {
        let tls = self.tls.as_ref().expect("a set from start_tls");
        tls.ca_pem.clone().into_bytes()
    }

    /// The plain port of the data node the sentinels name by `port`.
    fn plain(&self, port: u16) -> u16 {
        self.tls
            .as_ref()
            .and_then(|tls| tls.plain_of.get(&port).copied())
            .unwrap_or(port)
    }

    /// `redis+sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3/mymaster`.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinel_ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!(
            "redis+sentinel://{}/{}",
            sentinels.join(","),
            Self::MASTER_NAME
        )
    }

    /// The port of the master as the (first) sentinel reports it.
    pub fn master(&self) -> u16 {
        let sentinel = self.sentinel_ports()[0];
        let named =
            master_addr(sentinel).unwrap_or_else(|e| panic!("ask sentinel {sentinel}: {e}"));
        self.plain(named)
    }

    /// The port of the data node that is not the master.
    pub fn replica(&self) -> u16 {
        let master = self.master();
        self.data
            .iter()
            .map(RedisProcess::port)
            .find(|&port| port != master)
            .expect("two data nodes")
    }

    /// A plain synchronous connection to a data node or a sentinel.
    pub fn connection(&self, port: u16) -> redis::Connection {
        connect(port)
    }

    /// SENTINEL FAILOVER mymaster (retried while the sentinel has no replica fit to
    /// promote, as right after a previous failover); returns (old master, new master) once a
    /// sentinel reports the new master. Does not wait for the old master to be demoted: it
    /// may accept writes for a while (about 10 s), which is what tests probe.
    pub fn failover(&self) -> (u16, u16) {
        let sentinel = self.sentinel_ports()[0];
        let old = master_addr(sentinel).unwrap_or_else(|e| panic!("ask sentinel {sentinel}: {e}"));
        let failover = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(Self::MASTER_NAME)
            .clone();
        wait_until(
            &format!("sentinel {sentinel} to accept SENTINEL FAILOVER"),
            SETTLE,
            || match failover.query::<()>(&mut connect(sentinel)) {
                Err(e) if matches!(e.code(), Some("NOGOODSLAVE" | "INPROG")) => Err(e.to_string()),
                Err(e) => panic!("SENTINEL FAILOVER on sentinel {sentinel}: {e}"),
                Ok(()) => Ok(()),
            },
        );
        let new = wait_until(
            &format!("sentinel {sentinel} to report a master other than {old}"),
            SETTLE,
            || match master_addr(sentinel)? {
                port if port != old => Ok(port),
                port => Err(format!("master still {port}")),
            },
        );
        (self.plain(old), self.plain(new))
    }

    fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(RedisProcess::port).collect()
    }
}

/// The master's port according to the sentinel on `sentinel`.
fn master_addr(sentinel: u16) -> Result<u16, String> {
    let name = RedisSentinels::MASTER_NAME;
    let (_ip, port): (String, u16) = query(
        sentinel,
        redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(name),
    )?;
    Ok(port)
}

/// `Ok` once the sentinel on `sentinel` reports `master` as up, knows two other sentinels,
/// and sees `replica` connected, in sync and recently described by INFO: what it checks
/// before it can promote the replica.
fn sentinel_ready(sentinel: u16, master: u16, replica: u16) -> Result<(), String> {
    let sentinel_cmd = |sub: &str| {
        redis::cmd("SENTINEL")
            .arg(sub)
            .arg(RedisSentinels::MASTER_NAME)
            .clone()
    };
    let reported = master_addr(sentinel)?;
    let state: HashMap<String, String> = query(sentinel, &sentinel_cmd("MASTER"))?;
    let replicas: Vec<HashMap<String, String>> = query(sentinel, &sentinel_cmd("REPLICAS"))?;
    let field =
        |map: &HashMap<String, String>, key: &str| map.get(key).cloned().unwrap_or_default();
    let replica_ok = replicas.iter().any(|r| {
        field(r, "port") == replica.to_string()
            && field(r, "flags") == "slave"
            && field(r, "master-link-status") == "ok"
            && field(r, "info-refresh")
                .parse()
                .is_ok_and(|ms: u64| ms < 10_000)
    });
    if reported == master
        && field(&state, "flags") == "master"
        && field(&state, "num-other-sentinels") == "2"
        && replica_ok
    {
        Ok(())
    } else {
        Err(format!(
            "master {reported}, state {state:?}, replicas {replicas:?}"
        ))
    }
}
