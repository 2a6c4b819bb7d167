//! Reads for [`crate::Reader`] on a pooled connection: each query returns the rows' JSON
//! `data`, decoded into the store's types.

use super::*;

/// A pooled connection lent to one [`crate::Reader`] closure.
pub(crate) type ReadConn<'a> = RefCell<&'a mut PgConn>;

fn decode<T: serde::de::DeserializeOwned>(
    target: &str,
    id: &str,
    data: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(data).map_err(|e| StoreError::Decode {
        path: target.to_string(),
        id: id.to_string(),
        message: e.to_string(),
    })
}

fn rows(
    c: &ReadConn<'_>,
    target: &str,
    sql: &'static str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> Result<Vec<postgres::Row>, StoreError> {
    c.borrow_mut()
        .query(sql, params)
        .map_err(|e| StoreError::Postgres {
            target: target.to_string(),
            message: pg_message(&e),
        })
}

fn id_data<T: serde::de::DeserializeOwned>(
    target: &str,
    rows: Vec<postgres::Row>,
) -> Result<Vec<T>, StoreError> {
    rows.iter()
        .map(|r| decode(target, r.get::<_, &str>(0), r.get::<_, &str>(1)))
        .collect()
}

pub(crate) fn session(c: &ReadConn<'_>, t: &str, id: &str) -> Result<Option<Session>, StoreError> {
    let r = rows(c, t, "SELECT id, data FROM session WHERE id = $1", &[&id])?;
    Ok(id_data(t, r)?.into_iter().next())
}

pub(crate) fn sessions(
    c: &ReadConn<'_>,
    t: &str,
    limit: usize,
    roots_only: bool,
) -> Result<Vec<Session>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = if roots_only {
        "SELECT id, data FROM session WHERE parent_id IS NULL ORDER BY time_updated DESC, id DESC LIMIT $1"
    } else {
        "SELECT id, data FROM session ORDER BY time_updated DESC, id DESC LIMIT $1"
    };
    id_data(t, rows(c, t, sql, &[&limit])?)
}

pub(crate) fn children(
    c: &ReadConn<'_>,
    t: &str,
    parent: &str,
) -> Result<Vec<Session>, StoreError> {
    let sql = "SELECT id, data FROM session WHERE parent_id = $1 ORDER BY id";
    id_data(t, rows(c, t, sql, &[&parent])?)
}

pub(crate) fn messages(
    c: &ReadConn<'_>,
    t: &str,
    session_id: &str,
) -> Result<Vec<MessageWithParts>, StoreError> {
    let msgs = rows(
        c,
        t,
        "SELECT id, data FROM message WHERE session_id = $1 ORDER BY id",
        &[&session_id],
    )?;
    let mut out: Vec<MessageWithParts> = Vec::with_capacity(msgs.len());
    for r in &msgs {
        let info: Message = decode(t, r.get(0), r.get(1))?;
        out.push(MessageWithParts {
            info,
            parts: Vec::new(),
        });
    }
    let parts = rows(
        c,
        t,
        "SELECT id, message_id, data FROM part WHERE session_id = $1 ORDER BY id",
        &[&session_id],
    )?;
    attach_parts(t, &mut out, &parts)?;
    Ok(out)
}

pub(crate) fn messages_page(
    c: &ReadConn<'_>,
    t: &str,
    session_id: &SessionId,
    limit: usize,
    before: Option<&MessageId>,
) -> Result<Vec<MessageWithParts>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let msgs = match before {
        Some(b) => rows(
            c,
            t,
            "SELECT id, data FROM message WHERE session_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
            &[&session_id, &b, &limit],
        )?,
        None => rows(
            c,
            t,
            "SELECT id, data FROM message WHERE session_id = $1 ORDER BY id DESC LIMIT $2",
            &[&session_id, &limit],
        )?,
    };
    let mut out: Vec<MessageWithParts> = Vec::with_capacity(msgs.len());
    for r in msgs.iter().rev() {
        out.push(MessageWithParts {
            info: decode(t, r.get(0), r.get(1))?,
            parts: Vec::new(),
        });
    }
    if out.is_empty() {
        return Ok(out);
    }
    let ids: Vec<&str> = out.iter().map(|m| m.info.id().as_str()).collect();
    let parts = rows(
        c,
        t,
        "SELECT id, message_id, data FROM part WHERE message_id = ANY($1) ORDER BY id",
        &[&ids],
    )?;
    attach_parts(t, &mut out, &parts)?;
    Ok(out)
}

/// Put each part row (`id, message_id, data`, in order) under its message in `out`; a part
/// whose message is not in `out` is passed over. Errors: a part that does not decode.
fn attach_parts(
    t: &str,
    out: &mut [MessageWithParts],
    parts: &[postgres::Row],
) -> Result<(), StoreError> {
    let index: HashMap<String, usize> = out
        .iter()
        .enumerate()
        .map(|(i, m)| (m.info.id().to_string(), i))
        .collect();
    for r in parts {
        let part: Part = decode(t, r.get(0), r.get(2))?;
        if let Some(&i) = index.get(r.get::<_, &str>(1)) {
            out[i].parts.push(part);
        }
    }
    Ok(())
}

pub(crate) fn latest_root(
    c: &ReadConn<'_>,
    t: &str,
    directory: Option<&str>,
) -> Result<Option<Session>, StoreError> {
    let r = match directory {
        Some(d) => rows(
            c,
            t,
            "SELECT id, data FROM session WHERE parent_id IS NULL AND directory = $1 ORDER BY time_updated DESC, id DESC LIMIT 1",
            &[&d],
        )?,
        None => rows(
            c,
            t,
            "SELECT id, data FROM session WHERE parent_id IS NULL ORDER BY time_updated DESC, id DESC LIMIT 1",
            &[],
        )?,
    };
    Ok(id_data(t, r)?.into_iter().next())
}

pub(crate) fn find_by_prefix(
    c: &ReadConn<'_>,
    t: &str,
    prefix: &str,
    upper: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    let r = rows(
        c,
        t,
        "SELECT id, data FROM session WHERE id >= $1 AND id < $2 LIMIT 2",
        &[&prefix, &upper],
    )?;
    Ok(r.iter().map(|r| (r.get(0), r.get(1))).collect())
}

pub(crate) fn event_count(c: &ReadConn<'_>, t: &str, session_id: &str) -> Result<u64, StoreError> {
    let r = rows(
        c,
        t,
        "SELECT COUNT(*) FROM event WHERE session_id = $1",
        &[&session_id],
    )?;
    Ok(r.first().map(|r| r.get::<_, i64>(0)).unwrap_or(0).max(0) as u64)
}

pub(crate) fn last_error(
    c: &ReadConn<'_>,
    t: &str,
    session_id: &str,
) -> Result<Option<String>, StoreError> {
    let r = rows(
        c,
        t,
        "SELECT (data::json -> 'error')::text FROM message \
         WHERE session_id = $1 AND role = 'assistant' ORDER BY id DESC LIMIT 1",
        &[&session_id],
    )?;
    Ok(r.first().and_then(|r| r.get::<_, Option<String>>(0)))
}

pub(crate) fn assistant_rows(c: &ReadConn<'_>, t: &str) -> Result<Vec<Message>, StoreError> {
    let sql = "SELECT id, data FROM message WHERE role = 'assistant' ORDER BY id";
    id_data(t, rows(c, t, sql, &[])?)
}

pub(crate) fn todos(
    c: &ReadConn<'_>,
    t: &str,
    session_id: &str,
) -> Result<Vec<crate::todo::Todo>, StoreError> {
    let r = rows(
        c,
        t,
        "SELECT data FROM todo WHERE session_id = $1 ORDER BY position",
        &[&session_id],
    )?;
    r.iter().map(|r| decode(t, session_id, r.get(0))).collect()
}

pub(crate) fn approvals(
    c: &ReadConn<'_>,
    t: &str,
    project: &str,
) -> Result<Option<String>, StoreError> {
    let r = rows(
        c,
        t,
        "SELECT data FROM permission WHERE project = $1",
        &[&project],
    )?;
    Ok(r.first().map(|r| r.get(0)))
}
