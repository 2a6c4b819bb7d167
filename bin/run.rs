//! `troupe run`: one prompt (or a command) in a new or an earlier session, its events
//! printed as they arrive, the exit code saying how the turn ended.

use super::*;

/// `troupe run`. With `--format json`, an error that ends the command (a start-up error such
/// as a missing session, an unknown model, provider or agent) is also printed on stdout as one
/// `{"type":"error","properties":{"timestamp","message","error":{"name":"StartupError",
/// "data":{"message"}}}}` line (the shape of the bus events around it), so a script reading
/// stdout sees why it ended; the same message goes to stderr.
pub(crate) async fn run(db: Option<PathBuf>, args: RunArgs) -> Result<ExitCode> {
    let json = args.format == Format::Json;
    let result = run_inner(db, args).await;
    if json && let Err(e) = &result {
        let message = format!("{e:#}").replace('\n', " ");
        let line = serde_json::json!({
            "type": "error",
            "properties": {
                "timestamp": troupe_session::now_ms(),
                "message": message,
                "error": {"name": "StartupError", "data": {"message": message}},
            },
        });
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
    result
}

async fn run_inner(db: Option<PathBuf>, args: RunArgs) -> Result<ExitCode> {
    let cwd = resolve_dir(args.opts.dir.clone())?;
    let mut text = args.message.join(" ");
    if !std::io::IsTerminal::is_terminal(&std::io::stdin())
        && troupe_config::env_path("TROUPE_NO_STDIN").is_none()
    {
        let mut piped = String::new();
        let _ = tokio::task::spawn_blocking(move || {
            let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut piped);
            piped
        })
        .await
        .map(|p| {
            if !p.trim().is_empty() {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(p.trim_end());
            }
        });
    }
    if text.trim().is_empty() && args.command.is_none() {
        bail!("no prompt given: troupe run \"what to do\"");
    }
    let (files, media) = attachments(&args.files)?;
    let schema = args
        .json_schema
        .as_deref()
        .map(structured::load_schema)
        .transpose()?;
    if args.opts.attach.is_some() && schema.is_some() {
        bail!("--json-schema cannot be used with --attach yet; run without --attach");
    }
    if args.command.is_some() && schema.is_some() {
        bail!("--json-schema cannot be used with --command yet; run the prompt without --command");
    }
    if let Some(url) = args.opts.attach.clone() {
        if args.command.is_some() {
            bail!("--command cannot be used with --attach yet; run it without --attach");
        }
        return attach::run(attach::AttachRun {
            url,
            password: server_password(args.opts.password.clone()),
            text,
            files,
            session: args.session.clone(),
            continue_: args.continue_,
            queue: args.queue,
            agent: args.opts.agent.clone(),
            model: args.opts.model.clone(),
            dir: args.opts.dir.as_ref().map(|_| cwd.clone()),
            json: args.format == Format::Json,
            print: output::PrintOptions {
                quiet: args.quiet,
                activity: activity::Activity::on_stderr(
                    std::io::IsTerminal::is_terminal(&std::io::stderr())
                        && args.format != Format::Json
                        && !args.quiet,
                ),
            },
            output_last_message: args.output_last_message.clone(),
        })
        .await;
    }
    let (mut config, agents) = load_agents(&cwd)?;
    if let Some(a) = &args.opts.agent {
        agents.require_selectable(a).map_err(|e| anyhow!("{e}"))?;
    }
    // The session `--session` names must exist before a model or a key is looked for: to
    // a typo in its id, "session not found" is the answer, not a missing API key.
    let named = match &args.session {
        Some(id) => {
            if let Some(path) = crate::missing_store(db.clone()) {
                bail!(
                    "session not found: {id} (nothing has run with the store at {} yet)",
                    path.display()
                );
            }
            let store = open_store(db.clone())?;
            let session = output::find_session(&store, id).await?;
            Some((store, session))
        }
        None => None,
    };
    let chosen = choose_model(args.opts.model.clone(), &config).await?;
    if let Some(m) = &chosen {
        // Fail before touching the store when the model cannot be resolved.
        config.resolve_model(m).map_err(|e| anyhow!("{e}"))?;
        // A local server's real context size instead of the unknown-model guesses.
        local::apply_detected_limits(&mut config, m).await;
    }
    if let Some(m) = &chosen {
        check_api_key(&config, m)?;
    }
    if !media.is_empty() {
        // Refuse before a session is created when the model that will run does not take
        // these media (the runtime checks again before storing the message).
        let agent_model = match &args.opts.agent {
            Some(a) => agents.require(a).ok().and_then(|a| a.model.clone()),
            None => agents
                .default_agent(config.config.default_agent.as_deref())
                .ok()
                .and_then(|a| a.model.clone()),
        };
        if let Some(m) = args.opts.model.clone().or(agent_model).or(chosen.clone())
            && let Ok(resolved) = config.resolve_model(&m)
        {
            for mime in &media {
                troupe_actors::inputs::check_mime(mime, &resolved)
                    .map_err(|e| anyhow!("-f: {e}"))?;
            }
        }
    }
    // Only an explicit --model (or the probed local server, when nothing is configured)
    // overrides the agent's own model; otherwise the runtime applies the usual precedence
    // (agent model, session model, config model).
    let model = args
        .opts
        .model
        .clone()
        .or_else(|| chosen.filter(|_| config.default_model().is_none()));
    let own = own_files(
        db.clone(),
        &args
            .output_last_message
            .as_deref()
            .into_iter()
            .collect::<Vec<_>>(),
    );
    let store = match &named {
        Some((store, _)) => store.clone(),
        None => open_store(db)?,
    };
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin())
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let json = args.format == Format::Json;
    // The activity line: only on a terminal, never in JSON or quiet mode.
    let activity = activity::Activity::on_stderr(
        std::io::IsTerminal::is_terminal(&std::io::stderr()) && !json && !args.quiet,
    );
    // In a terminal that answers permission asks, the model's questions are asked there
    // too; anywhere else nobody could answer them (the `question` tool is then denied).
    let terminal = match args.opts.permission {
        Some(PermissionMode::Ask) | None if interactive => {
            Some(Arc::new(asker::TerminalAsker::new(activity.clone())))
        }
        _ => None,
    };
    let responder: Arc<dyn troupe_tools::PermissionAsker> = match (&terminal, args.opts.permission)
    {
        (Some(t), _) => t.clone(),
        (None, Some(PermissionMode::Allow)) => Arc::new(troupe_actors::permission::Policy::Allow),
        _ => Arc::new(troupe_actors::permission::Policy::Deny),
    };
    let runtime = Runtime::start_with_agents(
        store.clone(),
        config,
        agents,
        registry(),
        responder,
        RuntimeOptions {
            interactive: terminal.is_some(),
            own_files: own,
            ..runtime_options()?
        },
    )
    .await?;
    if let Some(t) = terminal {
        runtime.set_question_asker(t);
    }

    let session = if let Some((_, session)) = named {
        session
    } else if args.continue_ {
        let d = cwd.display().to_string();
        match store.read(move |r| r.latest_root(Some(&d))).await? {
            Some(s) => s,
            None => {
                eprintln!(
                    "troupe: no earlier session in {} to continue; starting a new one",
                    cwd.display()
                );
                runtime.create_session(&cwd, None).await?
            }
        }
    } else {
        runtime.create_session(&cwd, None).await?
    };

    if let Some(title) = args
        .title
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let mut info = session.clone();
        info.title = title.to_string();
        store.write1(troupe_session::Write::Session {
            info,
            created: false,
        });
        store.flush().await?;
    }
    let mut rx = runtime.bus().subscribe();
    let printer = output::Printer::new(
        json,
        session.id.clone(),
        output::PrintOptions {
            quiet: args.quiet,
            activity: activity.clone(),
        },
    );
    let sid = session.id.clone();
    let input = PromptInput {
        text,
        agent: args.opts.agent.clone(),
        model,
        system: None,
        files,
        schema,
        steer: !args.queue,
        ..Default::default()
    };
    let rt2 = runtime.clone();
    // Listen before the turn starts, so no signal falls between the early handler and ours.
    let mut sigs = signals::Signals::take_over()?;
    let command = args.command.clone();
    let mut turn = tokio::spawn(async move {
        let r = match command {
            Some(name) => {
                let command = troupe_actors::command::CommandInput {
                    name,
                    arguments: input.text,
                    agent: input.agent,
                    model: input.model,
                    files: input.files,
                };
                rt2.command(&sid, command).await
            }
            None => rt2.prompt(&sid, input).await,
        };
        // Background subagents the turn started run on after it; their results start
        // turns of their own (printed like this one), which the run waits for first. The
        // run then reports the latest turn: its error decides the exit code and its text
        // is the last message.
        let later = rt2.wait_background(&sid).await;
        match (r, later) {
            (Ok(first), Some(later)) if later.ends_after(&first) => Ok(later),
            (r, _) => r,
        }
    });

    // Ctrl-C or SIGTERM: the first aborts the turn (partial output is kept, parts closed),
    // a second exits at once, whatever the process is doing by then (e.g. waiting for a
    // title at shutdown).
    let interrupts = Arc::new(std::sync::atomic::AtomicU32::new(0));
    {
        let (rt3, sid3, n) = (runtime.clone(), session.id.clone(), interrupts.clone());
        tokio::spawn(async move {
            while let Some(sig) = sigs.next().await {
                if n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 1 {
                    let _ = std::io::stdout().flush();
                    eprintln!("\ntroupe: interrupted twice, exiting now");
                    std::process::exit(128 + sig);
                }
                if sig == libc::SIGTERM {
                    eprintln!("\ntroupe: SIGTERM: aborting the turn");
                } else {
                    eprintln!("\ntroupe: interrupting (press Ctrl-C again to exit at once)");
                }
                // A signal in the first instants can arrive before the session actor has
                // the prompt: repeat the abort until the turn has ended (the process exits
                // right after).
                let (rt4, sid4) = (rt3.clone(), sid3.clone());
                tokio::spawn(async move {
                    loop {
                        rt4.abort(&sid4);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                });
            }
        });
    }
    let mut printer = printer;
    printer.start();
    let result = loop {
        tokio::select! {
            r = &mut turn => break r,
            ev = rx.recv() => printer.received(ev),
        }
    };
    // Everything the turn wrote is committed and published; print the rest.
    let _ = runtime.store().flush().await;
    while let Ok(ev) = rx.try_recv() {
        printer.event(&ev);
    }
    printer.finish();
    let result = result.map_err(|e| anyhow!("the turn task failed: {e}"))?;
    if let Ok(turn) = &result
        && let Some(value) = &turn.structured
    {
        structured::print_output(json, &turn.session_id, value);
    }
    if let (Some(path), Ok(turn)) = (&args.output_last_message, &result) {
        // The turn's last assistant text (or its structured answer), ending with a newline
        // like a text file.
        let mut text = match &turn.structured {
            Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
            None => turn.text.clone(),
        };
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        std::fs::write(path, text)
            .map_err(|e| anyhow!("--output-last-message {}: {e}", path.display()))?;
    }
    if interrupts.load(std::sync::atomic::Ordering::SeqCst) > 0 {
        runtime.shutdown_within(Duration::ZERO).await;
    } else {
        runtime.shutdown().await;
    }
    match result {
        Ok(turn) => match turn.error {
            None => Ok(ExitCode::SUCCESS),
            Some(e) if e.name == troupe_session::MessageErrorName::MessageAborted => {
                eprintln!(
                    "troupe: aborted; session {} can be continued with --continue",
                    turn.session_id
                );
                Ok(ExitCode::from(signals::abort_exit_code()))
            }
            Some(e) => {
                let msg = e.message().replace('\n', " ");
                eprintln!("troupe: {}: {}", e.name, sanitize::terminal_safe(&msg));
                Ok(ExitCode::from(1))
            }
        },
        // Interrupted before the turn started ("aborted before it started").
        Err(e) if interrupts.load(std::sync::atomic::Ordering::SeqCst) > 0 => {
            eprintln!("troupe: aborted ({e})");
            Ok(ExitCode::from(signals::abort_exit_code()))
        }
        Err(e) => Err(anyhow!("{e}")),
    }
}
