//! Redis Cluster end to end: three primaries started by the test, keys of
//! many slots, layered limits in one slot, and a node that lost the library.

mod common;

use tollgate::{Algorithm, Backend, BackendExt, Limit, Policy, Quota, State};
use tollgate_core::decide_all;

const T0_US: u64 = 1_700_000_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_decides_like_the_core_and_reloads_a_lost_library() {
    let Some(cluster) = common::cluster() else {
        return;
    };
    let redis = common::backend(&cluster.url()).await;
    assert!(redis.uses_functions());
    // Connecting loads nothing: the first call on each node does.
    for node in cluster.nodes() {
        let list = node.cli(&["function", "list"]).unwrap();
        assert!(!list.contains(tollgate_redis::FUNCTION), "{list}");
    }
    // Two limits per key (one slot per key), keys spread over every node.
    let limits: Vec<Limit> = Algorithm::ALL
        .iter()
        .map(|&a| Limit::new(a, Quota::with_parts(3, 1_000_000, 4).unwrap()))
        .collect();
    let mut used_nodes = std::collections::HashSet::new();
    for (i, pair) in limits.windows(2).enumerate() {
        let policy = Policy::with_limits(pair.to_vec()).unwrap();
        let policy = redis.prepare(&policy).unwrap();
        for k in 0..6 {
            let key = format!("user-{i}-{k}");
            let mut states: Vec<State> = pair
                .iter()
                .map(|l| State::new(l.algorithm, &l.quota))
                .collect();
            for (step, (dt, cost)) in [(0, 1), (5, 2), (5, 1), (400, 3), (900, 1)]
                .into_iter()
                .enumerate()
            {
                let now = T0_US + dt * (step as u64 + 1);
                let core = decide_all(&mut states, pair, now * 1000, cost);
                let store = redis
                    .check_at(&key, policy.policy(), cost, now)
                    .await
                    .unwrap();
                assert_eq!(
                    store,
                    common::at_store_resolution(core),
                    "{key} step {step}"
                );
            }
            let slot_key = redis.redis_keys(&key, policy.policy()).unwrap().remove(0);
            let slot = cluster.nodes()[0]
                .cli(&["cluster", "keyslot", &slot_key])
                .unwrap();
            used_nodes.insert(node_of(&cluster, slot.trim().parse().unwrap()));
        }
    }
    assert_eq!(used_nodes.len(), 3, "keys landed on every primary");
    for node in cluster.nodes() {
        let list = node.cli(&["function", "list"]).unwrap();
        assert!(
            list.contains(tollgate_redis::FUNCTION),
            "library on port {}",
            node.port()
        );
    }

    // One primary loses the library: decisions on its keys carry on, and
    // the library is back on it afterwards.
    let policy = redis.prepare(&Policy::new(limits[4])).unwrap();
    let lost = &cluster.nodes()[1];
    lost.cli(&["function", "flush"]).unwrap();
    for k in 0..30 {
        let d = redis
            .check(&format!("after-flush-{k}"), &policy, 1)
            .await
            .unwrap();
        assert!(d.allowed);
    }
    let list = lost.cli(&["function", "list"]).unwrap();
    assert!(
        list.contains(tollgate_redis::FUNCTION),
        "reloaded on port {}",
        lost.port()
    );
}

/// The port of the node holding keys in `slot`.
fn node_of(cluster: &tollgate_redis::harness::RedisCluster, slot: u16) -> u16 {
    for node in cluster.nodes() {
        let count = node
            .cli(&["cluster", "countkeysinslot", &slot.to_string()])
            .unwrap();
        if count.trim() != "0" {
            return node.port();
        }
    }
    panic!("no node holds slot {slot}");
}

/// The index of the node owning `redis_key`'s slot, from `CLUSTER SLOTS`.
fn owner(cluster: &tollgate_redis::harness::RedisCluster, redis_key: &str) -> usize {
    let slot: u16 = cluster.nodes()[0]
        .cli(&["cluster", "keyslot", redis_key])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let nodes = cluster.nodes()[0].cli(&["cluster", "nodes"]).unwrap();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let port: u16 = fields[1].split(['@', ':']).nth(1).unwrap().parse().unwrap();
        let owns = fields[8..].iter().any(|range| match range.split_once('-') {
            Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).contains(&slot),
            None => range.parse() == Ok(slot),
        });
        if owns {
            return cluster
                .nodes()
                .iter()
                .position(|n| n.port() == port)
                .unwrap();
        }
    }
    panic!("no node owns slot {slot}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_primary_only_affects_the_keys_of_its_slots() {
    let Some(cluster) = common::cluster() else {
        return;
    };
    let deadline = std::time::Duration::from_millis(250);
    let connect = || {
        common::config(&cluster.url())
            .timeout(deadline)
            .connect_timeout(std::time::Duration::from_secs(3))
            .connect()
    };
    let before = connect().await.unwrap();
    let policy = Policy::new(Limit::new(Algorithm::Gcra, Quota::per_second(100).unwrap()));
    // Keys until every node owns a few.
    let keys: Vec<(String, usize)> = (0..30)
        .map(|k| {
            let key = format!("k{k}");
            let slot_key = before.redis_keys(&key, &policy).unwrap().remove(0);
            let node = owner(&cluster, &slot_key);
            (key, node)
        })
        .collect();
    for (key, _) in &keys {
        before
            .check(key, &before.prepare(&policy).unwrap(), 1)
            .await
            .unwrap();
    }
    let paused = 1;
    cluster.nodes()[paused].pause().unwrap();
    // A backend connected before the pause and one connected during it.
    let during = connect().await;
    let outcome = async {
        let during = during.map_err(|e| format!("connecting during the pause: {e}"))?;
        for (name, redis) in [("before", &before), ("during", &during)] {
            for (key, node) in &keys {
                let result = redis.check(key, &redis.prepare(&policy).unwrap(), 1).await;
                match (*node == paused, &result) {
                    (false, Ok(_)) => {}
                    (true, Err(tollgate::BackendError::Timeout(_))) => {}
                    _ => return Err(format!("{name}: {key} on node {node}: {result:?}")),
                }
            }
        }
        Ok(())
    }
    .await;
    cluster.nodes()[paused].resume().unwrap();
    outcome.unwrap();
}
