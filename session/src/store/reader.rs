//! Reads: [`Reader`], the connection one `Store::read` closure borrows, and its queries
//! (answered by SQLite here or by `crate::pg` for a PostgreSQL store).

use super::*;

/// Read access to the store (one connection, lent to one `Store::read` closure).
pub struct Reader<'a> {
    pub(super) conn: ReadConn<'a>,
    pub(super) path: &'a Path,
}

pub(super) enum ReadConn<'a> {
    Sqlite(&'a Connection),
    Pg(&'a crate::pg::ReadConn<'a>),
}

/// Pick the SQLite connection of a [`Reader`], or answer the read from PostgreSQL:
/// `sqlite_or!(self, |c, t| pg::fn(c, t, args…))`.
macro_rules! sqlite_or {
    ($reader:expr, |$c:ident, $t:ident| $pg:expr) => {
        match &$reader.conn {
            ReadConn::Sqlite(conn) => *conn,
            ReadConn::Pg($c) => {
                let target = $reader.path.to_string_lossy();
                let $t: &str = &target;
                return $pg;
            }
        }
    };
}

fn decode<T: serde::de::DeserializeOwned>(
    path: &Path,
    id: &str,
    data: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(data).map_err(|e| StoreError::Decode {
        path: path.display().to_string(),
        id: id.to_string(),
        message: e.to_string(),
    })
}

/// The assistant messages among `messages`, in order.
fn assistants(messages: impl IntoIterator<Item = Message>) -> Vec<crate::types::AssistantMessage> {
    messages
        .into_iter()
        .filter_map(|m| match m {
            Message::Assistant(a) => Some(a),
            Message::User(_) => None,
        })
        .collect()
}

impl Reader<'_> {
    /// Run `sql` (it selects `id, data`) on SQLite with `params` and decode each row's
    /// `data`, keeping its id. Errors: SQLite, or a row that does not decode.
    fn decoded<T: serde::de::DeserializeOwned>(
        &self,
        conn: &Connection,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let mut stmt = conn
            .prepare_cached(sql)
            .map_err(|e| sql_err(self.path, e))?;
        let rows = stmt
            .query_map(params, |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(|e| sql_err(self.path, e))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, data) = row.map_err(|e| sql_err(self.path, e))?;
            let value = decode(self.path, &id, &data)?;
            out.push((id, value));
        }
        Ok(out)
    }

    /// One session.
    pub fn session(&self, id: &SessionId) -> Result<Option<Session>, StoreError> {
        let conn = sqlite_or!(self, |c, t| crate::pg::session(c, t, id));
        let row: Option<String> = conn
            .query_row("SELECT data FROM session WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(|e| sql_err(self.path, e))?;
        row.map(|d| decode(self.path, id, &d)).transpose()
    }

    /// Sessions, newest updated first. `roots_only` skips child sessions.
    pub fn sessions(&self, limit: usize, roots_only: bool) -> Result<Vec<Session>, StoreError> {
        let conn = sqlite_or!(self, |c, t| crate::pg::sessions(c, t, limit, roots_only));
        let sql = if roots_only {
            "SELECT id, data FROM session WHERE parent_id IS NULL ORDER BY time_updated DESC, id DESC LIMIT ?1"
        } else {
            "SELECT id, data FROM session ORDER BY time_updated DESC, id DESC LIMIT ?1"
        };
        let rows = self.decoded(conn, sql, [limit as i64])?;
        Ok(rows.into_iter().map(|(_, s)| s).collect())
    }

    /// Child sessions of `parent`, oldest first.
    pub fn children(&self, parent: &SessionId) -> Result<Vec<Session>, StoreError> {
        let conn = sqlite_or!(self, |c, t| crate::pg::children(c, t, parent));
        let rows = self.decoded(
            conn,
            "SELECT id, data FROM session WHERE parent_id = ?1 ORDER BY id",
            [parent],
        )?;
        Ok(rows.into_iter().map(|(_, s)| s).collect())
    }

    /// All messages of a session with their parts, ordered by id.
    pub fn messages(&self, session_id: &SessionId) -> Result<Vec<MessageWithParts>, StoreError> {
        let conn = sqlite_or!(self, |c, t| crate::pg::messages(c, t, session_id));
        let rows: Vec<(String, Message)> = self.decoded(
            conn,
            "SELECT id, data FROM message WHERE session_id = ?1 ORDER BY id",
            [session_id],
        )?;
        let mut out: Vec<MessageWithParts> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for (id, info) in rows {
            index.insert(id, out.len());
            out.push(MessageWithParts {
                info,
                parts: Vec::new(),
            });
        }
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, message_id, data FROM part WHERE session_id = ?1 ORDER BY id",
            )
            .map_err(|e| sql_err(self.path, e))?;
        let rows = stmt
            .query_map([session_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(|e| sql_err(self.path, e))?;
        for row in rows {
            let (id, mid, data) = row.map_err(|e| sql_err(self.path, e))?;
            let part: Part = decode(self.path, &id, &data)?;
            if let Some(&i) = index.get(&mid) {
                out[i].parts.push(part);
            }
        }
        Ok(out)
    }

    /// One page of a session's messages with their parts, for `GET
    /// /session/{id}/message?limit=&before=`: the newest `limit` messages whose id sorts
    /// before `before` (all of them when `before` is `None`), returned oldest first like
    /// [`Self::messages`]. Its cost is the page's, not the session's: the message and part
    /// indexes (`message_session`, `part_message`) are walked for the page only.
    pub fn messages_page(
        &self,
        session_id: &SessionId,
        limit: usize,
        before: Option<&MessageId>,
    ) -> Result<Vec<MessageWithParts>, StoreError> {
        let conn = sqlite_or!(self, |c, t| crate::pg::messages_page(
            c, t, session_id, limit, before
        ));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // Two statements rather than `(?2 IS NULL OR id < ?2)`: with the OR, SQLite seeks
        // the index on `session_id` only and walks back from the session's newest message;
        // `id < ?2` alone makes it seek straight to the page.
        let sql = if before.is_some() {
            "SELECT id, data FROM message WHERE session_id = ?1 AND id < ?2 \
             ORDER BY id DESC LIMIT ?3"
        } else {
            "SELECT id, data FROM message WHERE session_id = ?1 ORDER BY id DESC LIMIT ?2"
        };
        let rows: Vec<(String, Message)> = match before {
            Some(b) => self.decoded(conn, sql, params![session_id, b, limit])?,
            None => self.decoded(conn, sql, params![session_id, limit])?,
        };
        let mut out: Vec<MessageWithParts> = rows
            .into_iter()
            .rev()
            .map(|(_, info)| MessageWithParts {
                info,
                parts: Vec::new(),
            })
            .collect();
        for m in &mut out {
            let parts: Vec<(String, Part)> = self.decoded(
                conn,
                "SELECT id, data FROM part WHERE message_id = ?1 ORDER BY id",
                [m.info.id()],
            )?;
            m.parts = parts.into_iter().map(|(_, p)| p).collect();
        }
        Ok(out)
    }

    /// The newest root session, optionally only among sessions in `directory`.
    pub fn latest_root(&self, directory: Option<&str>) -> Result<Option<Session>, StoreError> {
        let conn = sqlite_or!(self, |c, t| crate::pg::latest_root(c, t, directory));
        let row: Option<(String, String)> = match directory {
            Some(d) => conn.query_row(
                "SELECT id, data FROM session WHERE parent_id IS NULL AND directory = ?1 ORDER BY time_updated DESC, id DESC LIMIT 1",
                [d],
                |r| Ok((r.get(0)?, r.get(1)?)),
            ),
            None => conn.query_row(
                "SELECT id, data FROM session WHERE parent_id IS NULL ORDER BY time_updated DESC, id DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            ),
        }
        .optional()
        .map_err(|e| sql_err(self.path, e))?;
        row.map(|(id, d)| decode(self.path, &id, &d)).transpose()
    }

    /// Find a session by id or unique id prefix (case-sensitive, byte order; an empty
    /// prefix finds nothing).
    pub fn find_session(&self, id_or_prefix: &str) -> Result<Option<Session>, StoreError> {
        if let Some(s) = self.session(&SessionId::from(id_or_prefix))? {
            return Ok(Some(s));
        }
        if id_or_prefix.is_empty() {
            return Ok(None);
        }
        // Every id starting with the prefix sorts in [prefix, prefix + U+10FFFF) (byte order;
        // ids are ASCII), which both backends answer from the primary key's index. A LIKE
        // pattern would be case-insensitive in SQLite and needs `_` escaped (the `_` of
        // `ses_` once made every prefix miss).
        let upper = format!("{id_or_prefix}\u{10FFFF}");
        let conn = match &self.conn {
            ReadConn::Sqlite(c) => *c,
            ReadConn::Pg(c) => {
                let t = self.path.to_string_lossy();
                let rows = crate::pg::find_by_prefix(c, &t, id_or_prefix, &upper)?;
                return match rows.as_slice() {
                    [(id, d)] => Ok(Some(decode(self.path, id, d)?)),
                    _ => Ok(None),
                };
            }
        };
        let mut stmt = conn
            .prepare_cached("SELECT id, data FROM session WHERE id >= ?1 AND id < ?2 LIMIT 2")
            .map_err(|e| sql_err(self.path, e))?;
        let rows: Vec<(String, String)> = stmt
            .query_map(params![id_or_prefix, upper], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| sql_err(self.path, e))?
            .collect::<Result<_, _>>()
            .map_err(|e| sql_err(self.path, e))?;
        match rows.as_slice() {
            [(id, d)] => Ok(Some(decode(self.path, id, d)?)),
            _ => Ok(None),
        }
    }

    /// Number of events logged for a session.
    pub fn event_count(&self, session_id: &SessionId) -> Result<u64, StoreError> {
        let conn = sqlite_or!(self, |c, t| crate::pg::event_count(c, t, session_id));
        conn.query_row(
            "SELECT COUNT(*) FROM event WHERE session_id = ?1",
            [session_id],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n as u64)
        .map_err(|e| sql_err(self.path, e))
    }

    /// The error of `session_id`'s last assistant message (`{name, data}`), `None` when its
    /// last turn ended without one or it has no assistant message. One indexed lookup.
    pub fn last_error(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<crate::types::MessageError>, StoreError> {
        let conn =
            sqlite_or!(self, |c, t| Ok(crate::pg::last_error(c, t, session_id)?
                .and_then(|t| serde_json::from_str(&t).ok())));
        let mut stmt = conn
            .prepare_cached(
                "SELECT json_extract(data, '$.error') FROM message \
                 WHERE session_id = ?1 AND role = 'assistant' ORDER BY id DESC LIMIT 1",
            )
            .map_err(|e| sql_err(self.path, e))?;
        let mut rows = stmt
            .query([session_id])
            .map_err(|e| sql_err(self.path, e))?;
        let Some(row) = rows.next().map_err(|e| sql_err(self.path, e))? else {
            return Ok(None);
        };
        let raw: Option<String> = row.get(0).map_err(|e| sql_err(self.path, e))?;
        Ok(raw.and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// Every assistant message in the store (for usage statistics), oldest first.
    pub fn assistant_messages(&self) -> Result<Vec<crate::types::AssistantMessage>, StoreError> {
        let conn = sqlite_or!(self, |c, t| Ok(assistants(crate::pg::assistant_rows(
            c, t
        )?)));
        let rows: Vec<(String, Message)> = self.decoded(
            conn,
            "SELECT id, data FROM message WHERE role = 'assistant' ORDER BY id",
            [],
        )?;
        Ok(assistants(rows.into_iter().map(|(_, m)| m)))
    }

    /// A session's todo list, in order (empty when it has none). Errors: SQLite, or a row
    /// that does not decode.
    pub fn todos(&self, session_id: &SessionId) -> Result<Vec<crate::todo::Todo>, StoreError> {
        let conn = sqlite_or!(self, |c, t| crate::pg::todos(c, t, session_id));
        let mut stmt = conn
            .prepare_cached("SELECT data FROM todo WHERE session_id = ?1 ORDER BY position")
            .map_err(|e| sql_err(self.path, e))?;
        let rows: Vec<String> = stmt
            .query_map([session_id], |r| r.get(0))
            .map_err(|e| sql_err(self.path, e))?
            .collect::<Result<_, _>>()
            .map_err(|e| sql_err(self.path, e))?;
        rows.iter()
            .map(|d| decode(self.path, session_id, d))
            .collect()
    }

    /// The stored "always" approvals of a project (raw ruleset JSON), if any.
    pub fn approvals(&self, project: &str) -> Result<Option<String>, StoreError> {
        let conn = sqlite_or!(self, |c, t| crate::pg::approvals(c, t, project));
        conn.query_row(
            "SELECT data FROM permission WHERE project = ?1",
            [project],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| sql_err(self.path, e))
    }
}
