use super::*;
use crate::store_suite::both_backends;
use crate::test_support::user_message;
use crate::types::*;

both_backends! {
/// Two store handles (two processes) writing the same session at once: every write is
/// stored, and the session's event log has one gap-free sequence (no two events share a
/// number, none is lost to a conflict).
async fn two_handles_share_one_event_sequence(db) {
    let (a, b) = (db.open(), db.open());
    let s = Session::new("/tmp", None);
    a.write1(Write::Session {
        info: s.clone(),
        created: true,
    });
    a.flush().await.unwrap();
    let writer = |store: Store, n: usize| {
        let sid = s.id.clone();
        tokio::spawn(async move {
            for i in 0..n {
                let m = user_message(&sid, crate::id::message(), i as i64);
                let p = Part::new(
                    &sid,
                    m.id(),
                    PartKind::Text {
                        text: format!("{i}"),
                        synthetic: false,
                        time: None,
                    },
                );
                store.write(vec![Write::Message(m), Write::Part(p)]);
                if i % 7 == 0 {
                    store.flush().await.unwrap();
                }
            }
            store.flush().await.unwrap();
        })
    };
    let (ja, jb) = (writer(a.clone(), 60), writer(b.clone(), 60));
    ja.await.unwrap();
    jb.await.unwrap();
    let sid = s.id.clone();
    let msgs = a.read(move |r| r.messages(&sid)).await.unwrap();
    assert_eq!(msgs.len(), 120);
    assert!(msgs.iter().all(|m| m.parts.len() == 1));
    let sid = s.id.clone();
    assert_eq!(b.read(move |r| r.event_count(&sid)).await.unwrap(), 241);
}
}

both_backends! {
/// Many handles opening a new database at once: exactly one migrates, all work.
async fn concurrent_opens_of_a_new_database_migrate_once(db) {
    let target = db.target();
    let opened: Vec<Store> = (0..6)
        .map(|_| {
            let t = target.clone();
            std::thread::spawn(move || Store::open_target(t, Bus::new()))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap().expect("every concurrent open succeeds"))
        .collect();
    let s = Session::new("/tmp", None);
    opened[0].write1(Write::Session {
        info: s.clone(),
        created: true,
    });
    opened[0].flush().await.unwrap();
    for store in &opened {
        let id = s.id.clone();
        assert_eq!(store.read(move |r| r.session(&id)).await.unwrap(), Some(s.clone()));
    }
    if let TestDb::Postgres(schema) = &db {
        assert_eq!(
            schema.query_text("SELECT version::text FROM troupe_schema").as_deref(),
            Some("2")
        );
        assert_eq!(
            schema.query_text("SELECT COUNT(*)::text FROM troupe_schema").as_deref(),
            Some("1")
        );
    }
}
}

both_backends! {
/// Ids sort by byte order on both backends (PostgreSQL's columns are `COLLATE "C"`), so
/// message order is the ids' time order, whatever the server's locale.
async fn ids_sort_bytewise(db) {
    let store = db.open();
    let s = Session::new("/tmp", None);
    let ids = ["msg_0A", "msg_0_", "msg_0a", "msg_0b", "msg_1"];
    let mut writes = vec![Write::Session {
        info: s.clone(),
        created: true,
    }];
    for id in ids.iter().rev() {
        writes.push(Write::Message(user_message(&s.id, id.to_string(), 1)));
    }
    store.write(writes);
    let sid = s.id.clone();
    let got: Vec<String> = store
        .read(move |r| r.messages(&sid))
        .await
        .unwrap()
        .iter()
        .map(|m| m.info.id().to_string())
        .collect();
    let mut sorted: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    sorted.sort();
    assert_eq!(got, sorted);
}
}

both_backends! {
/// Sessions, children, prefixes, todos, approvals and removals read the same on both.
async fn every_row_kind_round_trips(db) {
    let store = db.open();
    let root = Session::new("/work", None);
    let child = Session::new("/work", Some(root.id.clone()));
    let m = user_message(&root.id, crate::id::message(), 5);
    let p = Part::new(
        &root.id,
        m.id(),
        PartKind::Text {
            text: "x".into(),
            synthetic: false,
            time: None,
        },
    );
    let todos: Vec<crate::todo::Todo> = serde_json::from_value(serde_json::json!([
        {"content": "a", "status": "pending", "priority": "high"},
        {"content": "b", "status": "completed", "priority": "low"}
    ]))
    .unwrap();
    store.write(vec![
        Write::Session { info: root.clone(), created: true },
        Write::Session { info: child.clone(), created: true },
        Write::Message(m.clone()),
        Write::Part(p.clone()),
        Write::Todos { session_id: root.id.clone(), todos: todos.clone() },
        Write::Approvals { project: "/work".into(), data: "{\"bash\":\"allow\"}".into() },
    ]);
    store.flush().await.unwrap();
    let (rid, cid) = (root.id.clone(), child.id.clone());
    let prefix = root.id[..root.id.len() - 1].to_string();
    let (kids, roots, all, latest, found, t, a) = store
        .read(move |r| {
            Ok((
                r.children(&rid)?,
                r.sessions(10, true)?,
                r.sessions(10, false)?,
                r.latest_root(Some("/work"))?,
                r.find_session(&prefix)?,
                r.todos(&rid)?,
                r.approvals("/work")?,
            ))
        })
        .await
        .unwrap();
    assert_eq!(kids.iter().map(|s| s.id.clone()).collect::<Vec<_>>(), [cid]);
    assert_eq!(roots, vec![root.clone()]);
    assert_eq!(all.len(), 2);
    assert_eq!(latest, Some(root.clone()));
    assert_eq!(found, Some(root.clone()));
    // "ses_" is shared by both sessions: ambiguous, so nothing; another case: nothing.
    let upper_case = root.id[..root.id.len() - 1].to_uppercase().replace("SES_", "ses_");
    let (ambiguous, wrong_case) = store
        .read(move |r| Ok((r.find_session("ses_")?, r.find_session(&upper_case)?)))
        .await
        .unwrap();
    assert_eq!(ambiguous, None);
    assert_eq!(wrong_case, None);
    assert_eq!(t, todos);
    assert_eq!(a.as_deref(), Some("{\"bash\":\"allow\"}"));
    // Removals: the part, then the message, then the whole child session.
    store.write(vec![
        Write::RemovePart(p.clone()),
        Write::RemoveMessage { session_id: root.id.clone(), message_id: m.id().clone() },
        Write::DeleteSession(child.clone()),
    ]);
    let (rid, cid) = (root.id.clone(), child.id.clone());
    let (msgs, gone, events) = store
        .read(move |r| Ok((r.messages(&rid)?, r.session(&cid)?, r.event_count(&rid)?)))
        .await
        .unwrap();
    assert!(msgs.is_empty());
    assert_eq!(gone, None);
    // created, message, part, todos, part removed, message removed.
    assert_eq!(events, 6);
}
}

both_backends! {
async fn last_error_is_the_last_assistant_messages(db) {
    let store = db.open();
    let s = Session::new("/tmp", None);
    let assistant = |error: Option<MessageError>| AssistantMessage {
        id: crate::id::message(),
        session_id: s.id.clone(),
        parent_id: "msg_u".into(),
        time: AssistantTime {
            created: 1,
            completed: Some(2),
        },
        agent: "build".into(),
        model_id: "m".into(),
        provider_id: "p".into(),
        path: MessagePath::default(),
        summary: false,
        cost: rust_decimal::Decimal::ZERO,
        tokens: Tokens::default(),
        finish: None,
        error,
        structured: None,
    };
    store.write1(Write::Session {
        info: s.clone(),
        created: true,
    });
    store.flush().await.unwrap();
    let sid = s.id.clone();
    assert_eq!(store.read(move |r| r.last_error(&sid)).await.unwrap(), None);
    let failed = MessageError::new(MessageErrorName::Api, "bad request");
    store.write1(Write::Message(Message::Assistant(assistant(Some(
        failed.clone(),
    )))));
    store.flush().await.unwrap();
    let sid = s.id.clone();
    assert_eq!(
        store.read(move |r| r.last_error(&sid)).await.unwrap(),
        Some(failed)
    );
    // A later turn that went well clears it.
    store.write1(Write::Message(Message::Assistant(assistant(None))));
    store.flush().await.unwrap();
    let sid = s.id.clone();
    assert_eq!(store.read(move |r| r.last_error(&sid)).await.unwrap(), None);
}
}

both_backends! {
async fn write_then_read_roundtrip_and_event_order(db) {
    let store = db.open();
    let mut rx = store.bus().subscribe();
    let s = Session::new("/tmp", None);
    let m = user_message(&s.id, crate::id::message(), 1);
    let p = Part::new(
        &s.id,
        m.id(),
        PartKind::Text {
            text: "hi".into(),
            synthetic: false,
            time: None,
        },
    );
    store.write(vec![
        Write::Session {
            info: s.clone(),
            created: true,
        },
        Write::Message(m.clone()),
    ]);
    store.write1(Write::Part(p.clone()));
    store.flush().await.unwrap();
    let sid = s.id.clone();
    let msgs = store.read(move |r| r.messages(&sid)).await.unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].parts, vec![p]);
    let types: Vec<&str> = (0..3).map(|_| rx.try_recv().unwrap().type_name()).collect();
    assert_eq!(
        types,
        ["session.created", "message.updated", "message.part.updated"]
    );
    let sid = s.id.clone();
    assert_eq!(store.read(move |r| r.event_count(&sid)).await.unwrap(), 3);
}
}

both_backends! {
/// `messages_page` walks back from the newest message in pages that cover every message
/// exactly once, each page oldest first and with its own parts only.
async fn messages_page_walks_back_without_gaps(db) {
    let store = db.open();
    let s = Session::new("/tmp", None);
    let mut writes = vec![Write::Session {
        info: s.clone(),
        created: true,
    }];
    let mut ids = Vec::new();
    for i in 0..7 {
        let m = user_message(&s.id, format!("msg_{i:03}"), i);
        let p = Part::new(
            &s.id,
            m.id(),
            PartKind::Text {
                text: format!("text {i}"),
                synthetic: false,
                time: None,
            },
        );
        ids.push(m.id().to_string());
        writes.push(Write::Message(m));
        writes.push(Write::Part(p));
    }
    store.write(writes);
    store.flush().await.unwrap();
    let page = |before: Option<MessageId>| {
        let sid = s.id.clone();
        let store = &store;
        async move {
            store
                .read(move |r| r.messages_page(&sid, 3, before.as_ref()))
                .await
                .unwrap()
        }
    };
    let newest = page(None).await;
    let got: Vec<&str> = newest.iter().map(|m| m.info.id().as_str()).collect();
    assert_eq!(got, ["msg_004", "msg_005", "msg_006"]);
    for m in &newest {
        assert_eq!(m.parts.len(), 1);
        assert_eq!(m.parts[0].message_id, *m.info.id());
    }
    let mut seen: Vec<String> = got.iter().map(|s| s.to_string()).collect();
    let mut before = Some(newest[0].info.id().clone());
    while let Some(b) = before.take() {
        let older = page(Some(b)).await;
        if let Some(first) = older.first() {
            before = Some(first.info.id().clone());
        }
        let mut ids: Vec<String> = older.iter().map(|m| m.info.id().to_string()).collect();
        ids.extend(seen);
        seen = ids;
    }
    assert_eq!(seen, ids);
    // An unknown session has no messages; a cursor before everything gives an empty page.
    let empty = store
        .read(|r| r.messages_page(&"ses_none".into(), 3, None))
        .await
        .unwrap();
    assert!(empty.is_empty());
    assert!(page(Some("msg_000".into())).await.is_empty());
}
}

both_backends! {
/// Issue 12.5: a side-effecting tool cut off by a process death says its outcome is
/// unknown; a read-only one, or one that never started, says aborted.
async fn sweep_says_outcome_unknown_for_side_effecting_tools(db) {
    let store = db.open();
    let s = Session::new("/tmp", None);
    let mid = crate::id::message();
    let tool = |name: &str, running: bool| {
        let input = serde_json::json!({"filePath": "a.txt"});
        let state = if running {
            ToolState::Running {
                input,
                title: None,
                metadata: None,
                time: ToolTime {
                    start: 7,
                    end: None,
                    compacted: None,
                },
            }
        } else {
            ToolState::Pending {
                input,
                raw: String::new(),
            }
        };
        Part::new(
            &s.id,
            &mid,
            PartKind::Tool {
                call_id: format!("call_{name}_{running}"),
                tool: name.into(),
                state,
            },
        )
    };
    let parts = vec![
        tool("write", true),
        tool("edit", true),
        tool("bash", true),
        tool("task", true),
        tool("mcp_thing", true),
        tool("read", true),
        tool("grep", true),
        tool("write", false),
    ];
    let mut history = vec![MessageWithParts {
        info: user_message(&s.id, mid.clone(), 1),
        parts,
    }];
    store.write1(Write::Session {
        info: s.clone(),
        created: true,
    });
    store.write1(Write::Message(history[0].info.clone()));
    assert_eq!(sweep_interrupted(&store, &mut history), 8);
    store.flush().await.unwrap();
    let sid = s.id.clone();
    let stored = store.read(move |r| r.messages(&sid)).await.unwrap();
    let errors: Vec<(String, serde_json::Value, i64)> = stored[0]
        .parts
        .iter()
        .map(|p| match &p.kind {
            PartKind::Tool {
                tool,
                state:
                    ToolState::Error {
                        error,
                        metadata,
                        time,
                        ..
                    },
                ..
            } => (
                format!("{tool}: {error}"),
                metadata.clone().unwrap_or_default(),
                time.start,
            ),
            other => panic!("not swept: {other:?}"),
        })
        .collect();
    for (i, name) in ["write", "edit", "bash", "task", "mcp_thing"]
        .iter()
        .enumerate()
    {
        assert_eq!(errors[i].0, format!("{name}: {OUTCOME_UNKNOWN}"));
        assert_eq!(
            errors[i].1,
            serde_json::json!({"interrupted": true, "outcome": "unknown"})
        );
        assert_eq!(errors[i].2, 7, "the real start is kept");
    }
    assert!(OUTCOME_UNKNOWN.contains("outcome is unknown"));
    assert_eq!(errors[5].0, "read: Tool execution aborted");
    assert_eq!(errors[6].0, "grep: Tool execution aborted");
    assert_eq!(errors[6].1, serde_json::json!({"interrupted": true}));
    // A pending write never started: nothing happened.
    assert_eq!(errors[7].0, "write: Tool execution aborted");
}
}

both_backends! {
/// Issue 12.4: what the loader found of a dead call's processes is in the swept error.
async fn sweep_reports_survivors_the_loader_stopped(db) {
    let store = db.open();
    let s = Session::new("/tmp", None);
    let mid = crate::id::message();
    let part = |n: u64| {
        Part::new(
            &s.id,
            &mid,
            PartKind::Tool {
                call_id: format!("call_{n}"),
                tool: "bash".into(),
                state: ToolState::Running {
                    input: serde_json::json!({"command": "sleep 100"}),
                    title: None,
                    metadata: Some(serde_json::json!({SURVIVORS_KEY: n})),
                    time: ToolTime {
                        start: 1,
                        end: None,
                        compacted: None,
                    },
                },
            },
        )
    };
    let mut history = vec![MessageWithParts {
        info: user_message(&s.id, mid.clone(), 1),
        parts: vec![part(0), part(2)],
    }];
    sweep_interrupted(&store, &mut history);
    let errors: Vec<(String, serde_json::Value)> = history[0]
        .parts
        .iter()
        .map(|p| match &p.kind {
            PartKind::Tool {
                state:
                    ToolState::Error {
                        error, metadata, ..
                    },
                ..
            } => (error.clone(), metadata.clone().unwrap_or_default()),
            other => panic!("not swept: {other:?}"),
        })
        .collect();
    assert_eq!(
        errors[0].0,
        format!("{OUTCOME_UNKNOWN} None of the processes it started is still running.")
    );
    assert_eq!(errors[0].1[SURVIVORS_KEY], 0);
    assert_eq!(
        errors[1].0,
        format!(
            "{OUTCOME_UNKNOWN} 2 process(es) it started were still running and have been stopped."
        )
    );
}
}

both_backends! {
async fn read_sees_writes_queued_before_it_without_flush(db) {
    let store = db.open();
    for _ in 0..20 {
        let s = Session::new("/tmp", None);
        store.write1(Write::Session {
            info: s.clone(),
            created: true,
        });
        let id = s.id.clone();
        assert_eq!(store.read(move |r| r.session(&id)).await.unwrap(), Some(s));
    }
    // A failed write is still reported by the next flush, not swallowed by the read.
    let m = user_message("ses_missing", crate::id::message(), 1);
    store.write1(Write::Message(m));
    store.read(|r| r.sessions(10, false)).await.unwrap();
    assert!(store.flush().await.is_err());
}
}

both_backends! {
async fn group_commit_window_delays_events_only_briefly(db) {
    let store = db.open();
    let mut rx = store.bus().subscribe();
    let s = Session::new("/tmp", None);
    let t0 = std::time::Instant::now();
    store.write1(Write::Session {
        info: s.clone(),
        created: true,
    });
    // No flush: the event comes after at most the window plus the commit.
    let ev = tokio::time::timeout(std::time::Duration::from_secs(2), rx.recv())
        .await
        .expect("event within 2 s")
        .expect("event");
    assert_eq!(ev.type_name(), "session.created");
    assert!(t0.elapsed() >= GROUP_COMMIT_WINDOW, "{:?}", t0.elapsed());
    // Many writers queued together land in order, and a flush sees all of them.
    let writes: Vec<Write> = (0..50)
        .map(|i| {
            let mut info = s.clone();
            info.title = format!("t{i}");
            Write::Session {
                info,
                created: false,
            }
        })
        .collect();
    for w in writes {
        store.write1(w);
    }
    store.flush().await.unwrap();
    let titles: Vec<String> = (0..50)
        .map(|_| match &*rx.try_recv().unwrap() {
            Event::SessionUpdated { info } => info.title.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(titles, (0..50).map(|i| format!("t{i}")).collect::<Vec<_>>());
    let sid = s.id.clone();
    let stored = store.read(move |r| r.session(&sid)).await.unwrap().unwrap();
    assert_eq!(stored.title, "t49");
    assert_eq!(store.read(move |r| r.event_count(&s.id)).await.unwrap(), 51);
}
}

both_backends! {
async fn reopen_keeps_data_and_migrations_are_idempotent(db) {
    let s = Session::new("/x", None);
    {
        let store = db.open();
        store.write1(Write::Session {
            info: s.clone(),
            created: true,
        });
        store.flush().await.unwrap();
    }
    let store = db.open();
    let id = s.id.clone();
    assert_eq!(store.read(move |r| r.session(&id)).await.unwrap(), Some(s));
}

}

both_backends! {
async fn write_error_surfaces_at_flush(db) {
    let store = db.open();
    // A message whose session does not exist violates the foreign key.
    let m = user_message("ses_missing", crate::id::message(), 1);
    store.write1(Write::Message(m));
    let err = store.flush().await.unwrap_err();
    let text = err.to_string();
    assert!(text.to_lowercase().contains("foreign key"), "{text}");
    // The error names the backend's target.
    if db.is_postgres() {
        assert!(text.starts_with("store postgres://"), "{text}");
    } else {
        assert!(text.contains("t.db"), "{text}");
    }
    // The next flush is clean again.
    store.flush().await.unwrap();
}
}

both_backends! {
/// One bad write in a batch fails alone: the good writes queued in the same batch (one
/// `write` call, so surely one transaction attempt) are stored and published, the bad one
/// is neither, and the next flush reports its error.
async fn a_good_write_in_the_batch_of_a_bad_one_lands(db) {
    let store = db.open();
    let mut rx = store.bus().subscribe();
    let s = Session::new("/tmp", None);
    let good = user_message(&s.id, crate::id::message(), 1);
    // A message whose session does not exist violates the foreign key.
    let bad = user_message("ses_missing", crate::id::message(), 2);
    let later = user_message(&s.id, crate::id::message(), 3);
    store.write(vec![
        Write::Session { info: s.clone(), created: true },
        Write::Message(good.clone()),
        Write::Message(bad.clone()),
        Write::Message(later.clone()),
    ]);
    let err = store.flush().await.unwrap_err();
    assert!(err.to_string().to_lowercase().contains("foreign key"), "{err}");
    let sid = s.id.clone();
    let (msgs, events) = store
        .read(move |r| Ok((r.messages(&sid)?, r.event_count(&sid)?)))
        .await
        .unwrap();
    let ids: Vec<&str> = msgs.iter().map(|m| m.info.id().as_str()).collect();
    assert_eq!(ids, [good.id(), later.id()]);
    assert_eq!(events, 3);
    let mut published = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        published.push(ev.type_name());
    }
    assert_eq!(published, ["session.created", "message.updated", "message.updated"]);
    // The error was reported once; the store goes on.
    store.flush().await.unwrap();
}
}

both_backends! {
/// An update of a session that was deleted meanwhile (a turn still closing its parts, a
/// late title) does not bring it back: updates never insert.
async fn an_update_after_the_delete_does_not_resurrect_the_session(db) {
    let store = db.open();
    let mut s = Session::new("/tmp", None);
    store.write1(Write::Session { info: s.clone(), created: true });
    store.flush().await.unwrap();
    store.write1(Write::DeleteSession(s.clone()));
    s.title = "a late title".into();
    store.write1(Write::Session { info: s.clone(), created: false });
    store.flush().await.expect("the update of a gone session is no error");
    let sid = s.id.clone();
    let (gone, events) = store
        .read(move |r| Ok((r.session(&sid)?, r.event_count(&sid)?)))
        .await
        .unwrap();
    assert_eq!(gone, None);
    assert_eq!(events, 0, "no event is logged for a session that is gone");
    // An update of a live session still updates it.
    let mut live = Session::new("/tmp", None);
    store.write1(Write::Session { info: live.clone(), created: true });
    live.title = "renamed".into();
    store.write1(Write::Session { info: live.clone(), created: false });
    store.flush().await.unwrap();
    let lid = live.id.clone();
    let got = store.read(move |r| r.session(&lid)).await.unwrap().expect("live session");
    assert_eq!(got.title, "renamed");
}
}

/// The writer's per-session sequence cache (`SeqCache`) never reuses or skips a number when
/// another store on the same file logs events of the same session between its batches:
/// `PRAGMA data_version` moves, the cache is dropped and `MAX(seq)` read again. Without
/// that check store `a`'s third batch would reuse the numbers `b` took (a primary-key
/// failure at the flush); a deleted session's log starts over at 1 as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sequence_cache_follows_commits_of_another_store_on_the_file() {
    let db = crate::store_suite::TestDb::sqlite();
    let (a, b) = (db.open(), db.open());
    let s = Session::new("/tmp", None);
    let sid = s.id.clone();
    let messages = |store: &Store, n: usize| {
        for i in 0..n {
            let m = user_message(&sid, crate::id::message(), i as i64);
            store.write1(Write::Message(m));
        }
    };
    a.write1(Write::Session {
        info: s.clone(),
        created: true,
    });
    messages(&a, 3);
    a.flush().await.unwrap();
    messages(&b, 4);
    b.flush().await.unwrap();
    messages(&a, 2);
    a.flush().await.expect("a's numbers follow b's");
    messages(&b, 1);
    messages(&a, 1);
    b.flush().await.unwrap();
    a.flush().await.unwrap();
    let seqs = |id: &str| -> Vec<i64> {
        let conn = rusqlite::Connection::open(db.target()).unwrap();
        let mut q = conn
            .prepare("SELECT seq FROM event WHERE session_id = ?1 ORDER BY seq")
            .unwrap();
        q.query_map([id], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(seqs(&sid), (1..=12).collect::<Vec<i64>>());
    // Deleted, then logged again by the store that cached its numbers: from 1.
    a.write1(Write::DeleteSession(s.clone()));
    a.flush().await.unwrap();
    a.write1(Write::Session {
        info: s.clone(),
        created: true,
    });
    messages(&a, 1);
    a.flush().await.unwrap();
    assert_eq!(seqs(&sid), vec![1, 2]);
}

/// Migration 3 turns the event log into a rowid table with a unique index on
/// `(session_id, seq)`: a store written by the previous schema (version 2) keeps every
/// event with its sequence, type, time and data, new events continue each session's
/// sequence, and a duplicate `(session_id, seq)` is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_log_of_schema_2_is_kept_through_the_rowid_migration() {
    let db = crate::store_suite::TestDb::sqlite();
    let path = db.target();
    let s = Session::new("/tmp", None);
    let sid = s.id.to_string();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        for sql in &sqlite::MIGRATIONS[..2] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 2).unwrap();
        conn.execute(
            "INSERT INTO session (id, parent_id, directory, title, time_created, time_updated, data)
             VALUES (?1, NULL, '/tmp', 't', 1, 1, ?2)",
            rusqlite::params![sid, serde_json::to_string(&s).unwrap()],
        )
        .unwrap();
        for (who, seq) in [(sid.as_str(), 1), ("ses_other", 1), (sid.as_str(), 2)] {
            conn.execute(
                "INSERT INTO event (session_id, seq, type, time, data) VALUES (?1, ?2, 'x', ?3, ?4)",
                rusqlite::params![who, seq, 100 + seq, format!("{{\"n\":{seq}}}")],
            )
            .unwrap();
        }
    }
    let store = db.open();
    store.write1(Write::Message(user_message(&s.id, crate::id::message(), 1)));
    store.flush().await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version as usize, sqlite::MIGRATIONS.len());
    let rows: Vec<(String, i64, String, i64, String)> = conn
        .prepare("SELECT session_id, seq, type, time, data FROM event ORDER BY session_id, seq")
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let of = |who: &str| -> Vec<(i64, &str, i64, &str)> {
        rows.iter()
            .filter(|r| r.0 == who)
            .map(|(_, seq, ty, time, data)| (*seq, ty.as_str(), *time, data.as_str()))
            .collect()
    };
    assert_eq!(of("ses_other"), vec![(1, "x", 101, "{\"n\":1}")]);
    let mine = of(&sid);
    assert_eq!(
        mine[..2],
        [(1, "x", 101, "{\"n\":1}"), (2, "x", 102, "{\"n\":2}")]
    );
    assert_eq!(
        (mine.len(), mine[2].0, mine[2].1),
        (3, 3, "message.updated")
    );
    let duplicate = conn.execute(
        "INSERT INTO event (session_id, seq, type, time, data) VALUES (?1, 3, 'y', 0, '{}')",
        [&sid],
    );
    assert!(duplicate.is_err(), "(session_id, seq) stays unique");
}

#[test]
fn the_busy_handler_sleeps_short_then_gives_up_after_the_busy_timeout() {
    assert_eq!(busy_delay_us(0), 50);
    assert_eq!(busy_delay_us(5), 1600);
    assert_eq!(busy_delay_us(6), 2000);
    assert_eq!(busy_delay_us(1000), 2000);
    let mut slept = 0;
    for tries in 0..10_000 {
        assert_eq!(busy_waited_us(tries), slept, "before try {tries}");
        slept += busy_delay_us(tries);
    }
    // It stops at the first try that has slept BUSY_TIMEOUT in all: 5 s.
    let limit = BUSY_TIMEOUT.as_micros() as u64;
    let last = (0..10_000).find(|&t| busy_waited_us(t) >= limit).unwrap();
    assert!(busy_waited_us(last) < limit + 2000);
}

/// A write lock another connection holds for a while is waited for, not failed: the second
/// `BEGIN IMMEDIATE` succeeds once the first commits.
#[test]
fn a_connection_waits_for_another_connections_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let a = open_conn(&path).unwrap();
    let b = open_conn(&path).unwrap();
    a.execute_batch("CREATE TABLE t (x INTEGER); BEGIN IMMEDIATE; INSERT INTO t VALUES (1);")
        .unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(30));
        a.execute_batch("COMMIT").unwrap();
    });
    b.execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (2); COMMIT;")
        .expect("waits for the lock");
    holder.join().unwrap();
    let n: i64 = b
        .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
}

/// Checkpoints run on the writer thread after a batch (`Store::wal_checkpoints` counts
/// them), not inside its commits: once the WAL holds `CHECKPOINT_FRAMES` frames
/// they are copied into the database file while the store stays open, and
/// every row is still there.
#[tokio::test]
async fn a_long_wal_is_checkpointed_into_the_database_file_after_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.db");
    let store = Store::open(&path, Bus::new()).unwrap();
    let s = Session::new("/tmp", None);
    store.write1(Write::Session {
        info: s.clone(),
        created: true,
    });
    let m = user_message(&s.id, crate::id::message(), 1);
    store.write1(Write::Message(m.clone()));
    store.flush().await.unwrap();
    assert_eq!(store.wal_checkpoints(), 0);
    let before = std::fs::metadata(&path).unwrap().len();
    // ~2,000 rows of 3 KB (each stored twice: the part and its event): well over
    // CHECKPOINT_FRAMES pages of 4 KiB.
    for batch in 0..20 {
        let writes = (0..100)
            .map(|i| {
                Write::Part(Part::new(
                    &s.id,
                    m.id(),
                    PartKind::Text {
                        text: format!("{batch}-{i} {}", "x".repeat(3000)),
                        synthetic: false,
                        time: None,
                    },
                ))
            })
            .collect();
        store.write(writes);
        store.flush().await.unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while store.wal_checkpoints() == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        store.wal_checkpoints() >= 1,
        "no checkpoint after the batches"
    );
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(
        after >= before + 4 * CHECKPOINT_FRAMES as u64 * 1024 / 2,
        "the database file grew from {before} to only {after} bytes"
    );
    let sid = s.id.clone();
    let msgs = store.read(move |r| r.messages(&sid)).await.unwrap();
    assert_eq!(msgs[0].parts.len(), 2000);
}

/// A reader on an old snapshot keeps the writer's finishing pass from copying every frame:
/// the round stays open and the writer waits `CHECKPOINT_RETRY` before its next pass instead
/// of trying after every batch (each pass sorts every frame not yet copied: a busy loop).
#[test]
fn an_incomplete_finishing_pass_waits_before_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("retry.db");
    let mut writer = open_conn(&path).unwrap();
    writer
        .execute_batch("CREATE TABLE t (x BLOB); INSERT INTO t VALUES (zeroblob(10000));")
        .unwrap();
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut wal = WalCheckpoints::start(&path, done.clone()).unwrap();
    wal.attach(&path, &mut writer).unwrap();
    // The reader's snapshot ends before the next insert's frames.
    let reader = open_conn(&path).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let n: i64 = reader
        .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    writer
        .execute_batch("INSERT INTO t VALUES (zeroblob(10000));")
        .unwrap();
    wal.set_copied();
    let t0 = std::time::Instant::now();
    wal.finish_round(&path, &writer, t0);
    assert_eq!(
        (
            wal.passes(),
            done.load(std::sync::atomic::Ordering::Relaxed)
        ),
        (1, 0)
    );
    wal.finish_round(&path, &writer, t0 + CHECKPOINT_RETRY / 2);
    assert_eq!(wal.passes(), 1, "a second pass before CHECKPOINT_RETRY");
    reader.execute_batch("COMMIT").unwrap();
    wal.finish_round(&path, &writer, t0 + CHECKPOINT_RETRY);
    assert_eq!(
        (
            wal.passes(),
            done.load(std::sync::atomic::Ordering::Relaxed)
        ),
        (2, 1)
    );
    // The round is over: nothing more until the checkpointer copies again.
    wal.finish_round(&path, &writer, t0 + 3 * CHECKPOINT_RETRY);
    assert_eq!(wal.passes(), 2);
}
