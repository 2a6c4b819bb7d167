//! `--page-probe`: paged reads of the first session's messages after the run, timed in µs.

use std::time::Instant;

use anyhow::{Result, anyhow};
use troupe_session::Store;

/// What `--page-probe` measured.
pub(crate) struct PageProbe {
    /// Messages stored in the probed session.
    pub(crate) messages: usize,
    /// Time of each page read (store read + JSON encoding), µs.
    pub(crate) us: Vec<f64>,
    /// Time of a trivial store read (the session row) before each page read, µs: the
    /// round trip to the store's reader thread that every read pays, for comparison.
    pub(crate) baseline_us: Vec<f64>,
}

/// Read pages of 50 messages of `sid` `n` times, each `before` a message spread evenly over
/// the session (the first read takes the newest page), as the paged message API does, and
/// time each read plus its JSON encoding in µs.
pub(crate) async fn page_probe(store: &Store, sid: String, n: usize) -> Result<PageProbe> {
    const LIMIT: usize = 50;
    let ids: Vec<String> = {
        let sid = sid.clone();
        store
            .read(move |r| r.messages(&sid.as_str().into()))
            .await
            .map_err(|e| anyhow!("store read: {e}"))?
            .iter()
            .map(|m| m.info.id().to_string())
            .collect()
    };
    let mut us = Vec::with_capacity(n);
    let mut baseline_us = Vec::with_capacity(n);
    for i in 0..n {
        let key = sid.clone();
        let start = Instant::now();
        store
            .read(move |r| r.session(&key.as_str().into()))
            .await
            .map_err(|e| anyhow!("session read: {e}"))?;
        baseline_us.push(start.elapsed().as_secs_f64() * 1e6);
        let before = (i > 0 && !ids.is_empty()).then(|| ids[(i * 7919) % ids.len()].clone());
        let sid = sid.clone();
        let start = Instant::now();
        let bytes = store
            .read(move |r| {
                r.messages_page(&sid.as_str().into(), LIMIT, before.map(Into::into).as_ref())
                    .map(|page| serde_json::to_vec(&page).map_or(0, |b| b.len()))
            })
            .await
            .map_err(|e| anyhow!("page read: {e}"))?;
        us.push(start.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(bytes);
    }
    Ok(PageProbe {
        messages: ids.len(),
        us,
        baseline_us,
    })
}
