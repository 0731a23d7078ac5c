//! Redis Cluster end to end: three primaries started by the test, keys of
//! many slots, layered limits in one slot, and a node that lost the library.

mod common;

use tollgate::{Algorithm, Backend, Limit, Policy, Quota, State};
use tollgate_core::decide_all;

const T0_US: u64 = 1_700_000_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_decides_like_the_core_and_reloads_a_lost_library() {
    let Some(cluster) = common::cluster() else {
        return;
    };
    let redis = common::backend(&cluster.url()).await;
    assert!(redis.uses_functions());
    for node in cluster.nodes() {
        let list = node.cli(&["function", "list"]).unwrap();
        assert!(
            list.contains(tollgate_redis::FUNCTION),
            "library on port {}",
            node.port()
        );
    }
    // Two limits per key (one slot per key), keys spread over every node.
    let limits: Vec<Limit> = Algorithm::ALL
        .iter()
        .map(|&a| Limit::new(a, Quota::with_parts(3, 1_000_000, 4).unwrap()))
        .collect();
    let mut used_nodes = std::collections::HashSet::new();
    for (i, pair) in limits.windows(2).enumerate() {
        let policy = Policy::with_limits(pair.to_vec()).unwrap();
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
                let store = redis.check_at(&key, &policy, cost, now).await.unwrap();
                assert_eq!(
                    store,
                    common::at_store_resolution(core),
                    "{key} step {step}"
                );
            }
            let slot_key = redis.redis_keys(&key, &policy).unwrap().remove(0);
            let slot = cluster.nodes()[0]
                .cli(&["cluster", "keyslot", &slot_key])
                .unwrap();
            used_nodes.insert(node_of(&cluster, slot.trim().parse().unwrap()));
        }
    }
    assert_eq!(used_nodes.len(), 3, "keys landed on every primary");

    // One primary loses the library: decisions on its keys carry on, and
    // the library is back on it afterwards.
    let policy = Policy::new(limits[4]);
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
