//! `troupe monitor` with a cluster: the workers of `GET /actors` `nodes` as rows.

use super::*;

/// A cluster server's `/actors`: the server's own (idle) runtime, an alive worker running one
/// session, a dead one.
fn cluster_tree() -> ActorNode {
    serde_json::from_str(
        r#"{
        "kind": "runtime", "id": "troupe", "status": "idle", "children": [],
        "nodes": [
            {"node": "w1", "host": "hostA", "pid": 41, "status": "alive",
             "lastHeartbeatMs": 800, "timeoutMs": 15000, "running": ["t-7"], "concurrency": 4,
             "counters": {}, "metrics": "",
             "tree": {"kind": "runtime", "id": "troupe", "status": "busy", "children": [
                {"kind": "session", "id": "ses_w1", "status": "busy", "agent": "build",
                 "steps": 2, "tokens": 300, "children": []}
             ]}},
            {"node": "w2", "host": "hostB", "pid": 42, "status": "dead",
             "lastHeartbeatMs": 65000, "timeoutMs": 15000, "running": ["t-1", "t-2"], "concurrency": 2,
             "tree": null, "someday": "a newer server's field"}
        ]
    }"#,
    )
    .expect("cluster tree")
}

#[test]
fn workers_are_rows_with_their_trees_below() {
    let text = render_tree_text(&cluster_tree(), 100_000);
    let expected = "\
runtime troupe        idle                                           steps=0 tokens=0 cost=$0.0000
  node w1             alive  1/4 tasks hostA:41 heartbeat 800ms ago  steps=0 tokens=0 cost=$0.0000
    runtime troupe    busy                                           steps=0 tokens=0 cost=$0.0000
      session ses_w1  busy   @build                                  steps=2 tokens=300 cost=$0.0000
  node w2             dead   2/2 tasks hostB:42 heartbeat 1m05s ago  steps=0 tokens=0 cost=$0.0000
";
    assert_eq!(text, expected, "got:\n{text}");
}

#[test]
fn the_header_counts_workers_and_dead_ones_but_not_as_actors() {
    let mut rows = flatten(&cluster_tree(), 100_000, &HashMap::new());
    let s = summarize(&mut rows, &BTreeMap::new());
    assert_eq!((s.actors, s.sessions, s.busy), (1, 1, 1));
    assert_eq!((s.nodes, s.dead_nodes), (2, 1));
    assert!(
        summary_line(&s).ends_with("nodes 2 (dead 1)"),
        "{}",
        summary_line(&s)
    );
    // Without a cluster the header says nothing of nodes.
    let mut local = flatten(&ActorNode::default(), 0, &HashMap::new());
    assert!(!summary_line(&summarize(&mut local, &BTreeMap::new())).contains("nodes"));
}
