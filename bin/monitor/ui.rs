//! The terminal view: the draw loop on a crossterm backend and the layout of one frame.

use super::*;

/// Restores the terminal when dropped (normal exit, error return or unwinding).
pub(super) struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

pub(super) fn ui_loop(url: &str, mut rx: watch::Receiver<Snapshot>) -> Result<()> {
    let mut terminal = ratatui::try_init().context("cannot set up the terminal")?;
    let _guard = TerminalGuard;
    let mut state = TableState::default().with_selected(Some(0));
    let mut snap = rx.borrow_and_update().clone();
    let mut rows = snap
        .tree
        .as_ref()
        .map(|t| flatten(t, now_ms(), &snap.labels))
        .unwrap_or_default();
    loop {
        if rx.has_changed().unwrap_or(false) {
            snap = rx.borrow_and_update().clone();
            rows = snap
                .tree
                .as_ref()
                .map(|t| flatten(t, now_ms(), &snap.labels))
                .unwrap_or_default();
        }
        if let Some(sel) = state.selected()
            && sel >= rows.len()
        {
            state.select(Some(rows.len().saturating_sub(1)));
        }
        let page = terminal
            .draw(|f| draw(f, url, &snap, &mut rows, &mut state))
            .context("drawing the terminal")?
            .area
            .height
            .saturating_sub(8)
            .max(1) as usize;
        if event::poll(Duration::from_millis(100)).context("reading terminal events")? {
            let Event::Key(k) = event::read().context("reading terminal events")? else {
                continue;
            };
            if k.kind != KeyEventKind::Press {
                continue;
            }
            let last = rows.len().saturating_sub(1);
            let sel = state.selected().unwrap_or(0);
            match k.code {
                KeyCode::Char('q') | KeyCode::Esc => break,
                KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => break,
                KeyCode::Down | KeyCode::Char('j') => state.select(Some((sel + 1).min(last))),
                KeyCode::Up | KeyCode::Char('k') => state.select(Some(sel.saturating_sub(1))),
                KeyCode::PageDown => state.select(Some((sel + page).min(last))),
                KeyCode::PageUp => state.select(Some(sel.saturating_sub(page))),
                KeyCode::Home | KeyCode::Char('g') => state.select(Some(0)),
                KeyCode::End | KeyCode::Char('G') => state.select(Some(last)),
                _ => {}
            }
        }
    }
    Ok(())
}

pub(super) fn status_style(status: &str) -> Style {
    match status {
        "busy" => Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
        "retry" => Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        "error" | "failed" | "dead" => Style::new().fg(Color::Red),
        "alive" => Style::new().fg(Color::Green),
        "draining" => Style::new().fg(Color::Yellow),
        _ => Style::new().fg(Color::DarkGray),
    }
}

pub(super) fn draw(
    f: &mut ratatui::Frame<'_>,
    url: &str,
    snap: &Snapshot,
    rows: &mut [TreeRow],
    state: &mut TableState,
) {
    let mut totals = metric_totals(&snap.metrics);
    let summary = summarize(rows, &totals);
    totals.retain(|k, _| !HEADER_METRICS.contains(&k.as_str()));
    let metric_lines = totals.len().div_ceil(3).min(6) as u16;
    let [header, metrics_area, tree_area, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(metric_lines + 2),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());

    // Header: URL, connection state, the figures of `summarize`.
    let conn = match &snap.error {
        None => Span::styled(" live ", Style::new().fg(Color::Black).bg(Color::Green)),
        Some(_) => Span::styled(
            match snap.at {
                Some(at) => format!(" stale {}s ", at.elapsed().as_secs()),
                None => " stale ".to_string(),
            },
            Style::new().fg(Color::Black).bg(Color::Red),
        ),
    };
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                " troupe monitor ",
                Style::new().add_modifier(Modifier::BOLD),
            ),
            conn,
            Span::raw(format!(
                "  {url}  {}  poll {}ms",
                summary_line(&summary),
                snap.latency.as_millis()
            )),
        ])),
        header,
    );

    // Counters, three per line.
    let entries: Vec<String> = totals
        .iter()
        .map(|(k, v)| format!("{} {}", k.trim_start_matches("troupe_"), fmt_metric(*v)))
        .collect();
    let width = (metrics_area.width.saturating_sub(2) / 3) as usize;
    let lines: Vec<Line> = entries
        .chunks(3)
        .take(metric_lines as usize)
        .map(|c| Line::from(c.iter().map(|e| format!("{e:<width$}")).collect::<String>()))
        .collect();
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" counters (/metrics) ")),
        metrics_area,
    );

    // Tree.
    let table_rows: Vec<Row> = rows
        .iter()
        .map(|r| {
            let mut extra = Vec::new();
            if r.restarts > 0 {
                extra.push(format!("r{}", r.restarts));
            }
            if r.failures > 0 {
                extra.push(format!("f{}", r.failures));
            }
            if r.queued > 0 {
                extra.push(format!("q{}", r.queued));
            }
            Row::new(vec![
                Cell::from(format!("{}{}", "  ".repeat(r.depth), r.kind)),
                Cell::from(if r.label.is_empty() {
                    r.id.clone()
                } else {
                    format!("{}  {}", r.id, r.label)
                }),
                Cell::from(r.status.clone()).style(status_style(&r.status)),
                Cell::from(r.detail.clone()),
                Cell::from(r.steps.to_string()),
                Cell::from(fmt_tokens(r.tokens)),
                Cell::from(fmt_cost(r.cost)),
                Cell::from(extra.join(" ")),
                Cell::from(r.age.clone()),
            ])
        })
        .collect();
    let table = Table::new(
        table_rows,
        [
            Constraint::Length(22),
            Constraint::Min(16),
            Constraint::Length(6),
            Constraint::Length(14),
            Constraint::Length(6),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(8),
        ],
    )
    .header(
        Row::new([
            "kind",
            "id",
            "status",
            "tool/agent",
            "steps",
            "tokens",
            "cost",
            "r/f/q",
            "age",
        ])
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)),
    )
    .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    .block(Block::bordered().title(format!(" supervision tree ({} actors) ", summary.actors)));
    f.render_stateful_widget(table, tree_area, state);

    let foot = match &snap.error {
        Some(e) => Line::from(Span::styled(format!(" {e}"), Style::new().fg(Color::Red))),
        None => Line::from(Span::styled(
            " q/Esc quit  ↑↓/j k move  PgUp/PgDn page  g/G top/bottom",
            Style::new().fg(Color::DarkGray),
        )),
    };
    f.render_widget(Paragraph::new(foot), footer);
}
