use super::*;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).expect("header value"));
    }
    h
}

fn status(g: &Guard, m: Method, pairs: &[(&'static str, &str)]) -> u16 {
    match g.check(&m, &headers(pairs)) {
        Ok(()) => 200,
        Err(e) => e.status.as_u16(),
    }
}

#[test]
fn repeated_host_origin_or_content_type_is_refused() {
    for password in [false, true] {
        let g = Guard::new("127.0.0.1", addr(4096), password, &[]);
        for (name, first, second) in [
            ("host", "127.0.0.1:4096", "evil.example"),
            ("origin", "http://127.0.0.1:4096", "http://evil.example"),
            ("content-type", "application/json", "text/plain"),
        ] {
            let mut h = headers(&[("host", "127.0.0.1:4096")]);
            h.remove(name);
            h.append(name, HeaderValue::from_str(first).expect("value"));
            h.append(name, HeaderValue::from_str(second).expect("value"));
            let status = match g.check(&Method::POST, &h) {
                Ok(()) => 200,
                Err(e) => e.status.as_u16(),
            };
            assert_eq!(status, 400, "two {name} headers, password {password}");
        }
    }
}

#[test]
fn only_loopback_hosts_of_the_bound_port_without_a_password() {
    let g = Guard::new("127.0.0.1", addr(4096), false, &[]);
    for ok in [
        "127.0.0.1:4096",
        "localhost:4096",
        "LOCALHOST:4096",
        "[::1]:4096",
    ] {
        assert_eq!(status(&g, Method::GET, &[("host", ok)]), 200, "{ok}");
    }
    for bad in [
        "evil.example",
        "evil.example:4096",
        "127.0.0.1:4097",
        "127.0.0.1",
        "localhost.:4096",
        "127.0.0.1.evil.example:4096",
    ] {
        assert_eq!(status(&g, Method::GET, &[("host", bad)]), 421, "{bad}");
    }
    assert_eq!(status(&g, Method::GET, &[]), 421, "no Host");
    // Port 80: browsers leave the port out.
    let g80 = Guard::new(
        "localhost",
        SocketAddr::from(([127, 0, 0, 1], 80)),
        false,
        &[],
    );
    assert_eq!(status(&g80, Method::GET, &[("host", "localhost")]), 200);
    assert_eq!(status(&g80, Method::GET, &[("host", "localhost:80")]), 200);
    // The bound address itself, e.g. another loopback address or IPv6.
    let g6 = Guard::new(
        "::1",
        SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], 9)),
        false,
        &[],
    );
    assert_eq!(status(&g6, Method::GET, &[("host", "[::1]:9")]), 200);
    let g2 = Guard::new(
        "127.0.0.2",
        SocketAddr::from(([127, 0, 0, 2], 9)),
        false,
        &[],
    );
    assert_eq!(status(&g2, Method::GET, &[("host", "127.0.0.2:9")]), 200);
    // With a password any Host is served (reverse proxies, LAN names).
    let gp = Guard::new("0.0.0.0", addr(4096), true, &[]);
    assert_eq!(status(&gp, Method::GET, &[("host", "box.lan:4096")]), 200);
}

#[test]
fn cross_site_origins_are_refused_on_every_method() {
    let g = Guard::new("127.0.0.1", addr(4096), false, &[]);
    let host = ("host", "127.0.0.1:4096");
    assert_eq!(
        status(
            &g,
            Method::GET,
            &[host, ("origin", "http://127.0.0.1:4096")]
        ),
        200
    );
    for bad in [
        "http://evil.example",
        "null",
        "http://localhost:4096", // another origin than the Host the page talks to
        "http://127.0.0.1:4097",
        "http://127.0.0.1:4096.evil.example",
    ] {
        assert_eq!(
            status(&g, Method::GET, &[host, ("origin", bad)]),
            403,
            "{bad}"
        );
        assert_eq!(
            status(
                &g,
                Method::POST,
                &[host, ("origin", bad), ("content-type", "application/json")]
            ),
            403,
            "{bad}"
        );
    }
    // A password does not lift the Origin check (cached Basic credentials).
    let gp = Guard::new("0.0.0.0", addr(4096), true, &[]);
    assert_eq!(
        status(
            &gp,
            Method::GET,
            &[("host", "box.lan:4096"), ("origin", "http://evil.example")]
        ),
        403
    );
    assert_eq!(
        status(
            &gp,
            Method::GET,
            &[("host", "box.lan:4096"), ("origin", "https://box.lan:4096")]
        ),
        200
    );
    // --cors lists origins that may call.
    let gc = Guard::new(
        "127.0.0.1",
        addr(4096),
        false,
        &["http://ui.example".into()],
    );
    assert_eq!(
        status(&gc, Method::GET, &[host, ("origin", "http://ui.example")]),
        200
    );
    assert_eq!(
        status(&gc, Method::GET, &[host, ("origin", "http://evil.example")]),
        403
    );
    // A top-level cross-site POST without Origin (old browsers) is refused by
    // Sec-Fetch-Site; a cross-site link to the page (GET) is fine.
    assert_eq!(
        status(
            &g,
            Method::POST,
            &[
                host,
                ("sec-fetch-site", "cross-site"),
                ("content-length", "0")
            ]
        ),
        403
    );
    assert_eq!(
        status(&g, Method::GET, &[host, ("sec-fetch-site", "cross-site")]),
        200
    );
}

#[test]
fn state_changing_bodies_must_be_json() {
    let g = Guard::new("127.0.0.1", addr(4096), false, &[]);
    let host = ("host", "127.0.0.1:4096");
    for ok in [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
    ] {
        assert_eq!(
            status(
                &g,
                Method::POST,
                &[host, ("content-type", ok), ("content-length", "2")]
            ),
            200,
            "{ok}"
        );
    }
    for bad in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonp",
    ] {
        for m in [Method::POST, Method::DELETE, Method::PUT, Method::PATCH] {
            assert_eq!(
                status(
                    &g,
                    m.clone(),
                    &[host, ("content-type", bad), ("content-length", "2")]
                ),
                403,
                "{m} {bad}"
            );
        }
        // Even with an empty body.
        assert_eq!(
            status(&g, Method::POST, &[host, ("content-type", bad)]),
            403,
            "{bad}"
        );
    }
    // A body without a type (a Blob from fetch) is refused; no body, no type passes.
    assert_eq!(
        status(&g, Method::POST, &[host, ("content-length", "20")]),
        403
    );
    assert_eq!(
        status(&g, Method::POST, &[host, ("transfer-encoding", "chunked")]),
        403
    );
    assert_eq!(status(&g, Method::POST, &[host]), 200);
    assert_eq!(
        status(&g, Method::DELETE, &[host, ("content-length", "0")]),
        200
    );
    // Reads may carry any type.
    assert_eq!(
        status(&g, Method::GET, &[host, ("content-type", "text/plain")]),
        200
    );
}
