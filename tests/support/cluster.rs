//! A real Redis Cluster of 3 masters and 3 replicas on loopback, to test slot routing,
//! MOVED redirections, failovers and node crashes.

use super::tls::write_certificates;
use super::{
    cli_binary, connect, info_field, poll_connection, query, replica_in_sync, wait_until,
    PortReservation, PortTaken, RedisProcess, ScratchDir, Topology,
};
use std::process::{Command, Stdio};
use std::time::Duration;

const SLOTS: u16 = 16384;
/// Long enough to ride out a busy machine's hiccups, short enough that a killed master is
/// failed over in a few seconds.
const NODE_TIMEOUT_MS: &str = "2000";
/// How long the cluster may take to settle after a start, a failover or a crash.
const SETTLE: Duration = Duration::from_secs(30);

/// Six cluster nodes; all killed on drop, their files removed.
pub struct RedisCluster {
    /// The nodes still running ([`kill`](RedisCluster::kill) removes one).
    nodes: Vec<RedisProcess>,
    /// The masters right after creation: the seeds of [`url`](RedisCluster::url).
    seeds: Vec<u16>,
    /// For a TLS cluster, each node's TLS port by its plain port, and the CA's PEM.
    tls: Option<(Vec<(u16, u16)>, String)>,
    _dir: ScratchDir,
    _ports: Vec<PortReservation>,
}

/// One slot range and the port of the master serving it, as a node reports it.
type SlotRange = (u16, u16, u16);

/// A line of CLUSTER NODES.
struct Node {
    id: String,
    port: u16,
    flags: Vec<String>,
    master_id: String,
}

/// 6 nodes: 3 masters + 3 replicas, on reserved loopback ports whose port+10000 (the
/// cluster bus) is reserved too, created by `<cli> --cluster create`. Started when every
/// node says cluster_state:ok, every node's CLUSTER SLOTS covers all 16384 slots with the
/// same masters, and every replica is in sync with its master (so a failover can happen).
///
/// With TLS, the nodes speak it to clients, between them and for replication
/// (`--tls-cluster yes --tls-replication yes`), and a node answers `CLUSTER SLOTS` with TLS
/// ports to TLS clients. See [`tls_url`](RedisCluster::tls_url) and
/// [`ca_pem`](RedisCluster::ca_pem).
impl Topology for RedisCluster {
    fn try_start(tls: bool) -> Result<RedisCluster, PortTaken> {
        // A TLS port's + 10000 is reserved too, and left unused.
        let (reserved, all) = PortReservation::many(if tls { 12 } else { 6 }, 10000);
        let (ports, tls_ports) = all.split_at(6);
        let dir = ScratchDir::new(&format!("cluster-{}", ports[0]));
        let ca_pem = tls.then(|| write_certificates(&dir));
        let mut nodes: Vec<RedisProcess> = ports
            .iter()
            .enumerate()
            .map(|(i, &port)| {
                let mut args: Vec<String> = [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    NODE_TIMEOUT_MS,
                    "--cluster-config-file",
                    "nodes.conf",
                    "--repl-diskless-sync-delay",
                    "0",
                    // DEBUG SLEEP hangs a node, as a stuck or overloaded master would.
                    "--enable-debug-command",
                    "local",
                ]
                .map(String::from)
                .to_vec();
                if tls {
                    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
                    args.extend([
                        "--tls-port".into(),
                        tls_ports[i].to_string(),
                        // The bus stays at port + 10000, which was found free.
                        "--cluster-port".into(),
                        (port + 10000).to_string(),
                        "--tls-cluster".into(),
                        "yes".into(),
                        "--tls-replication".into(),
                        "yes".into(),
                        "--tls-cert-file".into(),
                        file("server.crt"),
                        "--tls-key-file".into(),
                        file("server.key"),
                        "--tls-ca-cert-file".into(),
                        file("ca.crt"),
                        "--tls-auth-clients".into(),
                        "no".into(),
                    ]);
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                RedisProcess::spawn_node(port, &dir.join(port.to_string()), &args)
            })
            .collect();
        nodes
            .iter_mut()
            .try_for_each(RedisProcess::wait_until_ready)?;
        create(ports);
        let mut cluster = RedisCluster {
            nodes,
            seeds: Vec::new(),
            tls: ca_pem.map(|pem| {
                (
                    ports
                        .iter()
                        .copied()
                        .zip(tls_ports.iter().copied())
                        .collect(),
                    pem,
                )
            }),
            _dir: dir,
            _ports: reserved,
        };
        cluster.wait_until_ok();
        wait_until(
            "every cluster node to know 3 replicas, each in sync with its master",
            SETTLE,
            || cluster.replicas_in_sync(3),
        );
        cluster.seeds = cluster.masters();
        Ok(cluster)
    }
}

impl RedisCluster {
    /// `rediss+cluster://127.0.0.1:t1,…`: the TLS ports of the three initial masters. Only
    /// for [`start_tls`](Self::start_tls).
    pub fn tls_url(&self) -> String {
        let (tls_ports, _) = self.tls.as_ref().expect("a cluster from start_tls");
        let seeds: Vec<String> = self
            .seeds
            .iter()
            .map(|seed| {
                let (_, tls) = tls_ports.iter().find(|(plain, _)| plain == seed).unwrap();
                format!("127.0.0.1:{tls}")
            })
            .collect();
        format!("rediss+cluster://{}", seeds.join(","))
    }

    /// The PEM of the CA that signed the nodes' certificate. Only for
    /// [`start_tls`](Self::start_tls).
    pub fn ca_pem(&self) -> Vec<u8> {
        let (_, pem) = self.tls.as_ref().expect("a cluster from start_tls");
        pem.clone().into_bytes()
    }

    /// `redis+cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3`: the three initial masters.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .seeds
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The ports of all nodes still running.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisProcess::port).collect()
    }

    /// The ports of the current masters, as a live node sees them (failed ones left out),
    /// sorted.
    pub fn masters(&self) -> Vec<u16> {
        let mut masters: Vec<u16> = self
            .cluster_nodes()
            .iter()
            .filter(|n| n.has_flag("master") && !n.has_flag("fail") && !n.has_flag("noaddr"))
            .map(|n| n.port)
            .collect();
        masters.sort_unstable();
        masters
    }

    /// The port of the master serving `key`'s slot now.
    pub fn master_of(&self, key: &str) -> u16 {
        let port = self.live_port();
        let (slot, slots) = poll_connection(port)
            .and_then(|mut con| {
                let slot: u16 = redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(key)
                    .query(&mut con)
                    .map_err(|e| e.to_string())?;
                Ok((slot, slot_map(&mut con)?))
            })
            .unwrap_or_else(|e| panic!("find the slot of {key:?} on port {port}: {e}"));
        slots
            .iter()
            .find(|&&(first, last, _)| (first..=last).contains(&slot))
            .map(|&(_, _, master)| master)
            .unwrap_or_else(|| panic!("no master serves slot {slot} (of key {key:?}): {slots:?}"))
    }

    /// A live replica of `master`.
    pub fn replica_of(&self, master: u16) -> u16 {
        let nodes = self.cluster_nodes();
        let master_id = nodes
            .iter()
            .find(|n| n.port == master)
            .map(|n| &n.id)
            .unwrap_or_else(|| panic!("no cluster node on port {master}"));
        let live = self.ports();
        nodes
            .iter()
            .find(|n| &n.master_id == master_id && !n.has_flag("fail") && live.contains(&n.port))
            .map(|n| n.port)
            .unwrap_or_else(|| panic!("master {master} has no live replica"))
    }

    /// A plain synchronous connection to the node on `port`.
    pub fn connection(&self, port: u16) -> redis::Connection {
        connect(port)
    }

    /// CLUSTER FAILOVER on a replica of `master` (once it is in sync); returns the replica's
    /// port once it is master and every live node agrees, on the slots and on the old master
    /// now replicating it.
    pub fn failover(&mut self, master: u16) -> u16 {
        let replica = self.replica_of(master);
        wait_until(
            &format!("replica {replica} of {master} to be in sync before a failover"),
            SETTLE,
            || replica_in_sync(replica),
        );
        query::<()>(replica, redis::cmd("CLUSTER").arg("FAILOVER"))
            .unwrap_or_else(|e| panic!("CLUSTER FAILOVER on {replica}: {e}"));
        wait_until(
            &format!("every node to see {replica} as master instead of {master}"),
            SETTLE,
            || {
                let slots = self.agreed_slot_map()?;
                let masters: Vec<u16> = slots.iter().map(|&(_, _, m)| m).collect();
                if !masters.contains(&replica) || masters.contains(&master) {
                    return Err(format!("slots: {slots:?}"));
                }
                self.ports().into_iter().try_for_each(|port| {
                    let nodes = nodes_seen_by(port)?;
                    let find = |p: u16| nodes.iter().find(|n| n.port == p);
                    match (find(replica), find(master)) {
                        (Some(new), Some(old))
                            if new.has_flag("master")
                                && old.has_flag("slave")
                                && old.master_id == new.id =>
                        {
                            Ok(())
                        }
                        _ => Err(format!(
                            "port {port} does not see {master} replicate {replica}"
                        )),
                    }
                })
            },
        );
        replica
    }

    /// Kills the node on `port` with SIGKILL, as a crash would, and waits until it is gone.
    pub fn kill(&mut self, port: u16) {
        let index = self
            .nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no running cluster node on port {port}"));
        self.nodes.remove(index);
    }

    /// Waits (panics after 30 s) until every live node says cluster_state:ok and agrees on
    /// the masters of all slots, each of them a live node: after a crash of a master, until
    /// its replica has taken over.
    pub fn wait_until_ok(&self) {
        wait_until(
            "every live cluster node to say cluster_state:ok and agree on live masters for \
             all 16384 slots",
            SETTLE,
            || self.agreed_slot_map(),
        );
    }

    /// The slot map every live node reports, once they are all ok and agree on it and
    /// every master in it is running.
    fn agreed_slot_map(&self) -> Result<Vec<SlotRange>, String> {
        let live = self.ports();
        let mut agreed: Option<Vec<SlotRange>> = None;
        for &port in &live {
            let mut con = poll_connection(port)?;
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut con)
                .map_err(|e| format!("port {port}: {e}"))?;
            let state = info_field(&info, "cluster_state");
            if state != Some("ok") {
                return Err(format!("port {port}: cluster_state {state:?}"));
            }
            let slots = slot_map(&mut con).map_err(|e| format!("port {port}: {e}"))?;
            let mut next = 0;
            for &(first, last, master) in &slots {
                if first != next || !live.contains(&master) {
                    return Err(format!("port {port}: slots {slots:?}"));
                }
                next = last + 1;
            }
            if next != SLOTS {
                return Err(format!("port {port}: slots {slots:?}"));
            }
            match &agreed {
                Some(agreed) if *agreed != slots => {
                    return Err(format!("port {port}: slots {slots:?}, others {agreed:?}"));
                }
                _ => agreed = Some(slots),
            }
        }
        agreed.ok_or_else(|| "no live node".to_owned())
    }

    /// `Ok` once every live node knows `count` replicas and each is in sync: right after
    /// `--cluster create` a node may still list them all as masters.
    fn replicas_in_sync(&self, count: usize) -> Result<(), String> {
        for port in self.ports() {
            let replicas: Vec<u16> = nodes_seen_by(port)?
                .iter()
                .filter(|n| n.has_flag("slave"))
                .map(|n| n.port)
                .collect();
            if replicas.len() != count {
                return Err(format!("port {port} knows replicas {replicas:?}"));
            }
            replicas.into_iter().try_for_each(replica_in_sync)?;
        }
        Ok(())
    }

    fn cluster_nodes(&self) -> Vec<Node> {
        let port = self.live_port();
        nodes_seen_by(port).unwrap_or_else(|e| panic!("CLUSTER NODES: {e}"))
    }

    fn live_port(&self) -> u16 {
        self.ports()
            .first()
            .copied()
            .expect("every cluster node was killed")
    }
}

impl Node {
    /// `<id> <ip:port@bus[,hostname]> <flags> <master id or -> ...`
    fn parse(line: &str) -> Node {
        let fields: Vec<&str> = line.split(' ').collect();
        let port = fields.get(1).and_then(|addr| {
            addr.split(['@', ','])
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()
        });
        match (port, fields.get(2), fields.get(3)) {
            (Some(port), Some(flags), Some(master_id)) => Node {
                id: fields[0].to_owned(),
                port,
                flags: flags.split(',').map(str::to_owned).collect(),
                master_id: master_id.to_string(),
            },
            _ => panic!("unexpected CLUSTER NODES line: {line:?}"),
        }
    }

    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

/// CLUSTER NODES as the node on `port` reports it.
fn nodes_seen_by(port: u16) -> Result<Vec<Node>, String> {
    let text: String = query(port, redis::cmd("CLUSTER").arg("NODES"))?;
    Ok(text.lines().map(Node::parse).collect())
}

/// CLUSTER SLOTS as the node on `con` reports it: (first, last, master port), sorted.
fn slot_map(con: &mut redis::Connection) -> Result<Vec<SlotRange>, String> {
    let ranges: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(con)
        .map_err(|e| e.to_string())?;
    let mut slots = ranges
        .iter()
        .map(|range| match range.as_slice() {
            [first, last, master, ..] => {
                let master: Vec<redis::Value> = redis::from_redis_value_ref(master)?;
                let master_port = master.get(1).unwrap_or(&redis::Value::Nil);
                Ok((
                    redis::from_redis_value_ref(first)?,
                    redis::from_redis_value_ref(last)?,
                    redis::from_redis_value_ref(master_port)?,
                ))
            }
            _ => Err(format!("unexpected entry {range:?}").into()),
        })
        .collect::<Result<Vec<SlotRange>, Box<dyn std::error::Error>>>()
        .map_err(|e| format!("CLUSTER SLOTS: {e}"))?;
    slots.sort_unstable();
    Ok(slots)
}

/// `<cli> --cluster create` over `ports`, one replica per master; panics with its
/// output if it fails or takes more than 60 s.
fn create(ports: &[u16]) {
    let mut command = Command::new(cli_binary());
    command
        .args(["--cluster", "create"])
        .args(ports.iter().map(|p| format!("127.0.0.1:{p}")))
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = super::spawn_dying_with_test(&mut command);
    let status = wait_until(
        "the cluster to be created",
        Duration::from_secs(60),
        || match child.try_wait() {
            Ok(Some(status)) => Ok(status),
            _ => Err("still running".to_owned()),
        },
    );
    if !status.success() {
        let output = child.wait_with_output().expect("read redis-cli's output");
        panic!(
            "{command:?} failed ({status}):\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
