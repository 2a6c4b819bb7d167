use super::*;

fn names(text: &str) -> Vec<String> {
    mentions(text).into_iter().map(|m| m.name).collect()
}

#[test]
fn mentions_take_paths_and_agents_but_not_emails_or_code() {
    assert_eq!(
        names("look at @README.md and @src/main.rs#L10-20, then ask @explore."),
        ["README.md", "src/main.rs#L10-20", "explore"]
    );
    assert_eq!(
        names("mail me@example.com or `@decorator`"),
        Vec::<String>::new()
    );
    assert_eq!(names("(see @docs/a.md)"), ["docs/a.md"]);
    assert_eq!(names("@./x.txt? @~/notes.txt!"), ["./x.txt", "~/notes.txt"]);
    assert_eq!(names("@ alone, @@twice"), ["@twice"]);
    assert_eq!(names("a@b"), Vec::<String>::new());
    assert_eq!(names("@x?start=3&end=9"), ["x?start=3&end=9"]);
}

#[test]
fn mention_offsets_are_char_offsets() {
    let m = &mentions("héllo @explore now")[0];
    assert_eq!((m.start, m.end), (6, 14));
}

#[test]
fn ranges_split_from_paths() {
    let r = |start, end| Some(LineRange { start, end });
    assert_eq!(split_range("a.rs#L10-20"), ("a.rs", r(10, Some(20))));
    assert_eq!(split_range("a.rs#L10-L20"), ("a.rs", r(10, Some(20))));
    assert_eq!(split_range("a.rs#L7"), ("a.rs", r(7, None)));
    assert_eq!(
        split_range("/p/a.rs?start=3&end=4"),
        ("/p/a.rs", r(3, Some(4)))
    );
    assert_eq!(split_range("/p/a.rs?start=3"), ("/p/a.rs", r(3, None)));
    // Not ranges: kept as part of the path.
    assert_eq!(split_range("a.rs#L20-10"), ("a.rs#L20-10", None));
    assert_eq!(split_range("a.rs#L0"), ("a.rs#L0", None));
    assert_eq!(split_range("a.rs#Lx"), ("a.rs#Lx", None));
    assert_eq!(split_range("what?"), ("what?", None));
    assert_eq!(split_range("plain.txt"), ("plain.txt", None));
}

#[test]
fn ranges_become_offset_and_limit() {
    let r = LineRange {
        start: 10,
        end: Some(20),
    };
    assert_eq!(r.offset_limit(), (10, Some(11)));
    let one = LineRange {
        start: 5,
        end: Some(5),
    };
    assert_eq!(one.offset_limit(), (5, Some(1)));
    let open = LineRange {
        start: 5,
        end: None,
    };
    assert_eq!(open.offset_limit(), (5, None));
}

#[test]
fn media_by_name_and_by_signature() {
    assert_eq!(
        media_kind(Path::new("a/B.PNG")),
        MediaKind::Image("image/png")
    );
    assert_eq!(
        media_kind(Path::new("x.jpeg")),
        MediaKind::Image("image/jpeg")
    );
    assert_eq!(media_kind(Path::new("doc.pdf")), MediaKind::Pdf);
    assert_eq!(media_kind(Path::new("Makefile")), MediaKind::Text);
    assert_eq!(sniff_mime(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
    assert_eq!(sniff_mime(b"%PDF-1.7"), Some(PDF_MIME));
    assert_eq!(sniff_mime(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
    assert_eq!(sniff_mime(b"\x89PNG"), None);
    assert_eq!(sniff_mime(b"hello"), None);
}

/// The mock model resolved from a config whose `modalities.input` lists what it takes.
fn model(image: bool, pdf: bool) -> troupe_config::ResolvedModel {
    let mut input = vec!["text"];
    if image {
        input.push("image");
    }
    if pdf {
        input.push("pdf");
    }
    let cfg = json!({"provider": {"mock": {
        "npm": "@ai-sdk/openai-compatible",
        "options": {"baseURL": "http://127.0.0.1:1/v1", "apiKey": "k"},
        "models": {"m": {"name": "M", "limit": {"context": 1000, "output": 100},
                         "modalities": {"input": input, "output": ["text"]}}}
    }}});
    troupe_config::LoadedConfig::from_config(
        troupe_config::Config::from_jsonc("t", &cfg.to_string()).unwrap(),
    )
    .resolve_model("mock/m")
    .unwrap()
}

#[test]
fn media_reaches_only_models_that_take_it() {
    let image = PartKind::File {
        mime: "image/png".into(),
        filename: Some("a.png".into()),
        url: "data:image/png;base64,AAAA".into(),
    };
    let pdf = PartKind::File {
        mime: PDF_MIME.into(),
        filename: Some("a.pdf".into()),
        url: "data:application/pdf;base64,AAAA".into(),
    };
    let text = PartKind::File {
        mime: "text/plain".into(),
        filename: Some("a.txt".into()),
        url: "file:///p/a.txt".into(),
    };
    assert!(check_media(std::slice::from_ref(&text), &model(false, false)).is_ok());
    let e = check_media(std::slice::from_ref(&image), &model(false, true)).unwrap_err();
    assert!(
        e.contains("does not accept images") && e.contains("\"image\""),
        "{e}"
    );
    assert!(check_media(std::slice::from_ref(&image), &model(true, false)).is_ok());
    let e = check_media(std::slice::from_ref(&pdf), &model(true, false)).unwrap_err();
    assert!(
        e.contains("does not accept PDFs") && e.contains("\"pdf\""),
        "{e}"
    );
    assert!(check_media(&[image, pdf, text], &model(true, true)).is_ok());
}
