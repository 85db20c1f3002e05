//! A master, its replica and three Sentinels on loopback, to test discovering the master
//! through Sentinel and living through a failover.

use super::{connect, free_ports, query, replica_in_sync, wait_until, RedisProcess, ScratchDir};
use std::collections::HashMap;
use std::time::Duration;

/// How long Sentinel may take to discover the topology, or to carry out a failover.
const SETTLE: Duration = Duration::from_secs(20);

/// A master, a replica and 3 sentinels; all killed on drop, their files removed.
pub struct RedisSentinels {
    /// The two data nodes; which one is master changes with failovers.
    data: [RedisProcess; 2],
    sentinels: Vec<RedisProcess>,
    _dir: ScratchDir,
}

impl RedisSentinels {
    pub const MASTER_NAME: &'static str = "mymaster";

    /// A master, one replica of it, and 3 sentinels monitoring it with quorum 2 (down after
    /// 1 s, failover timeout 5 s). Ready when the replica is in sync and every sentinel
    /// reports the master, knows the 2 other sentinels, and has the replica as a healthy
    /// candidate for promotion (until then SENTINEL FAILOVER answers -NOGOODSLAVE).
    pub fn start() -> RedisSentinels {
        let ports = free_ports(5, 0);
        let (master, replica) = (ports[0], ports[1]);
        let dir = ScratchDir::new(&format!("sentinel-{master}"));
        // Either node may have to serve a full sync (the other is promoted later): at once.
        let sync_now = ["--repl-diskless-sync-delay", "0"];
        let master_arg = master.to_string();
        let replica_args = [
            sync_now[0],
            sync_now[1],
            "--replicaof",
            "127.0.0.1",
            &master_arg,
        ];
        let mut data = [(master, &sync_now[..]), (replica, &replica_args[..])]
            .map(|(port, args)| RedisProcess::spawn_node(port, &dir.join(port.to_string()), args));
        data.iter_mut().for_each(RedisProcess::wait_until_ready);
        // Sentinels learn replicas from the master's INFO: their first INFO comes as soon as
        // they connect, the next one 10 s later. Start them once the master lists the replica.
        wait_until("the replica to sync with the master", SETTLE, || {
            replica_in_sync(replica)
        });
        let mut sentinels: Vec<RedisProcess> = ports[2..]
            .iter()
            .map(|&port| {
                let conf = dir.join(format!("sentinel-{port}.conf"));
                let name = Self::MASTER_NAME;
                let text = format!(
                    "port {port}\nbind 127.0.0.1\n\
                     sentinel monitor {name} 127.0.0.1 {master} 2\n\
                     sentinel down-after-milliseconds {name} 1000\n\
                     sentinel failover-timeout {name} 5000\n\
                     sentinel parallel-syncs {name} 1\n"
                );
                std::fs::write(&conf, text)
                    .unwrap_or_else(|e| panic!("write {}: {e}", conf.display()));
                RedisProcess::spawn(port, [conf.as_os_str(), "--sentinel".as_ref()])
            })
            .collect();
        sentinels
            .iter_mut()
            .for_each(RedisProcess::wait_until_ready);
        let topology = RedisSentinels {
            data,
            sentinels,
            _dir: dir,
        };
        for sentinel in topology.sentinel_ports() {
            wait_until(
                &format!(
                    "sentinel {sentinel} to know master {master}, replica {replica}, 2 sentinels"
                ),
                SETTLE,
                || sentinel_ready(sentinel, master, replica),
            );
        }
        topology
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
        master_addr(sentinel).unwrap_or_else(|e| panic!("ask sentinel {sentinel}: {e}"))
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
        let old = self.master();
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
        (old, new)
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
