//! Rule-by-rule tests of SPEC §3–§6, each named after the rule it pins down.

use super::*;

fn allowed(robots: &str, agent: &str, url: &str) -> bool {
    RobotsTxt::parse(robots.as_bytes())
        .check(&[agent], url)
        .allowed
}

fn allowed_tokens(robots: &str, tokens: &[&str], url: &str) -> bool {
    RobotsTxt::parse(robots.as_bytes())
        .check(tokens, url)
        .allowed
}

const U: &str = "http://example.com";

// ---- §3 parsing -------------------------------------------------------------------

#[test]
fn s3_bom_and_line_ends() {
    assert!(!allowed("\u{feff}User-agent: *\nDisallow: /p\n", "a", "/p"));
    assert!(!allowed(
        "User-agent: *\rDisallow: /x\rDisallow: /p",
        "a",
        "/p"
    ));
    assert!(!allowed("User-agent: *\r\nDisallow: /p\r\n", "a", "/p"));
}

#[test]
fn s3_comments_whitespace_case() {
    let r = "  # c\nUSER-agent :\t* # all\n DISALLOW :  /p#frag \n";
    assert!(!allowed(r, "a", "/p"));
    assert!(allowed(r, "a", "/q"));
}

#[test]
fn s3_invalid_lines_are_skipped() {
    let r = "<html>\n<body>User-agent: nothing</body>\n\u{0}\u{ff}garbage\nUser-agent: *\nDisallow: /p\n";
    assert!(!allowed(r, "a", "/p"));
    let binary: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let robots = RobotsTxt::parse(&binary);
    assert!(robots.check(&["a"], "/x").allowed);
}

#[test]
fn s3_groups_end_at_a_user_agent_after_a_rule() {
    let r = "User-agent: a\nUser-agent: b\nDisallow: /x\nUser-agent: c\nDisallow: /y\n";
    assert!(!allowed(r, "a", "/x"));
    assert!(!allowed(r, "b", "/x"));
    assert!(allowed(r, "b", "/y"));
    assert!(!allowed(r, "c", "/y"));
    assert!(allowed(r, "c", "/x"));
}

#[test]
fn s3_rules_before_any_user_agent_are_ignored() {
    assert!(allowed(
        "Disallow: /\nUser-agent: *\nDisallow: /t\n",
        "a",
        "/p"
    ));
}

#[test]
fn s3_non_group_lines_do_not_end_groups() {
    let r = "User-agent: a\nSitemap: http://s/x.xml\nHost: h.example\nClean-param: s\nUser-agent: b\nDisallow: /x\n";
    assert!(!allowed(r, "a", "/x"));
    assert!(!allowed(r, "b", "/x"));
}

#[test]
fn s3_empty_rule_values_are_ignored() {
    assert!(allowed("User-agent: *\nDisallow:\n", "a", "/x"));
    // Yandex would read an empty Allow as Disallow: / — SPEC diverges deliberately.
    assert!(allowed("User-agent: *\nAllow:\n", "a", "/x"));
    // An empty rule still separates groups, as in the reference parser.
    let r = "User-agent: a\nDisallow:\nUser-agent: b\nDisallow: /x\n";
    assert!(allowed(r, "a", "/x"));
}

#[test]
fn s3_typos_the_reference_parser_accepts() {
    for field in ["dissallow", "dissalow", "disalow", "diasllow", "disallaw"] {
        assert!(
            !allowed(&format!("user-agent: *\n{field}: /x\n"), "a", "/x"),
            "{field}"
        );
    }
    assert!(!allowed("useragent: a\ndisallow: /x\n", "a", "/x"));
    assert!(!allowed("user agent: a\ndisallow: /x\n", "a", "/x"));
    // A missing colon is fine when the line is two words.
    assert!(!allowed("user-agent a\ndisallow /x\n", "a", "/x"));
    assert!(allowed("user-agent a\ndisallow /x y\n", "a", "/x"));
}

#[test]
fn s3_relative_rule_paths_get_a_slash() {
    assert!(!allowed("User-agent: *\nDisallow: fish/\n", "a", "/fish/x"));
    assert!(allowed("User-agent: *\nDisallow: fish/\n", "a", "/x/fish/"));
}

#[test]
fn s3_size_cap_ignores_the_tail() {
    let mut body = "User-agent: *\nDisallow: /a\n".to_string();
    while body.len() < MAX_ROBOTS_BYTES + 10 {
        body.push_str("# padding padding padding\n");
    }
    body.push_str("Disallow: /late\n");
    let robots = RobotsTxt::parse(body.as_bytes());
    assert!(robots.truncated());
    assert!(robots.check(&["x"], "/late").allowed);
    assert!(!robots.check(&["x"], "/a").allowed);
}

#[test]
fn s3_size_cap_cut_line_kept_only_if_disallow() {
    let pad = |prefix: &str, rule: &str| {
        let mut body = prefix.to_string();
        let fill = MAX_ROBOTS_BYTES - body.len() - 12;
        body.push_str(&"#".repeat(fill - 1));
        body.push('\n');
        body.push_str(rule); // starts 11 bytes before the cap
        body
    };
    let r = RobotsTxt::parse(
        pad("User-agent: *\nDisallow: /\n", "Allow: /publicly-visible\n").as_bytes(),
    );
    // `Allow: /pu` would open far more than the site wrote: dropped.
    assert!(!r.check(&["x"], "/public").allowed);
    let r = RobotsTxt::parse(pad("User-agent: *\n", "Disallow: /private-area\n").as_bytes());
    // `Disallow: /p` still covers `/private-area`.
    assert!(!r.check(&["x"], "/private-area").allowed);
}

#[test]
fn s3_long_lines_are_cut_like_the_reference_parser() {
    let long = format!("/x/{}", "a".repeat(MAX_LINE_BYTES));
    let r = format!("user-agent: FooBot\ndisallow: {long}/qux\n");
    assert!(allowed(&r, "FooBot", "/fux"));
    assert!(!allowed(&r, "FooBot", &format!("{long}/fux")));
}

// ---- §4 group selection -------------------------------------------------------------

#[test]
fn s4_agent_names_case_insensitive_and_prefix_token() {
    assert!(!allowed(
        "User-agent: GoogleBot\nDisallow: /\n",
        "googlebot",
        "/"
    ));
    assert!(!allowed(
        "User-agent: googlebot/2.1\nDisallow: /\n",
        "GOOGLEBOT",
        "/x"
    ));
    assert!(!allowed(
        "User-agent: googlebot*\nDisallow: /\n",
        "googlebot",
        "/x"
    ));
    // A token is compared whole: `Foo Bar` is not `Foo`.
    let r = "User-Agent: *\nDisallow: /\nUser-Agent: Foo Bar\nAllow: /x/\nDisallow: /\n";
    assert!(allowed(r, "Foo", "/x/y"));
    assert!(!allowed(r, "Foo Bar", "/x/y"));
}

#[test]
fn s4_star_followed_by_text_is_global() {
    assert!(!allowed(
        "User-agent: * (all robots)\nDisallow: /\n",
        "any",
        "/x"
    ));
    assert!(allowed("User-agent: *bot\nDisallow: /\n", "any", "/x"));
}

#[test]
fn s4_specific_group_replaces_global() {
    let r = "User-agent: *\nDisallow: /\nUser-agent: a\nDisallow: /private\n";
    assert!(allowed(r, "a", "/public"));
    assert!(!allowed(r, "b", "/public"));
    // A matching group without rules still wins over `*`.
    let r = "User-agent: *\nDisallow: /\nUser-agent: a\nDisallow:\n";
    assert!(allowed(r, "a", "/public"));
}

#[test]
fn s4_token_list_first_with_a_group_wins() {
    let r = "User-agent: googlebot\nDisallow: /g\nUser-agent: *\nDisallow: /s\n";
    assert!(!allowed_tokens(r, &["googlebot-images", "googlebot"], "/g"));
    assert!(allowed_tokens(r, &["googlebot-images", "googlebot"], "/s"));
    assert!(!allowed_tokens(r, &["other", "also-other"], "/s"));
    assert!(allowed_tokens(
        "User-agent: a\nDisallow: /\n",
        &["b", "c"],
        "/x"
    ));
}

#[test]
fn s4_groups_of_one_agent_are_merged() {
    let r = "User-agent: a\nDisallow: /one\nUser-agent: b\nDisallow: /b\nUser-agent: A\nDisallow: /two\nCrawl-delay: 3\n";
    let robots = RobotsTxt::parse(r.as_bytes());
    let group = robots
        .group_for(&["a"])
        .and_then(|g| robots.group(g))
        .expect("group");
    assert_eq!(&*group.lines, &[1, 5]);
    assert_eq!(group.crawl_delay, Some(3.0));
    assert!(!robots.check(&["a"], "/one").allowed);
    assert!(!robots.check(&["a"], "/two").allowed);
    assert!(robots.check(&["a"], "/b").allowed);
}

#[test]
fn s4_names_sharing_a_group_share_a_group_id() {
    let r = "User-agent: e\nUser-agent: f\nDisallow: /g\nUser-agent: h\nDisallow: /i\n";
    let robots = RobotsTxt::parse(r.as_bytes());
    assert_eq!(robots.group_for(&["e"]), robots.group_for(&["F"]));
    assert_ne!(robots.group_for(&["e"]), robots.group_for(&["h"]));
    assert_eq!(robots.group_for(&["nobody"]), None);
}

// ---- §5 matching ----------------------------------------------------------------------

#[test]
fn s5_query_and_params_are_matched_fragment_is_not() {
    assert!(!allowed(
        "User-agent: *\nDisallow: /*?q=\n",
        "a",
        &format!("{U}/s?q=1")
    ));
    assert!(!allowed(
        "User-agent: *\nDisallow: /p;jsessionid\n",
        "a",
        "/p;jsessionid=1"
    ));
    assert!(allowed(
        "User-agent: *\nDisallow: /*frag\n",
        "a",
        &format!("{U}/p#frag")
    ));
}

#[test]
fn s5_percent_encoding_normalisation() {
    let r = "User-agent: *\nDisallow: /caf\u{e9}\n";
    assert!(!allowed(r, "a", "/caf%C3%A9"));
    assert!(!allowed(r, "a", "/caf%c3%a9"));
    assert!(!allowed(r, "a", "/caf\u{e9}"));
    // Unreserved escapes are decoded on both sides.
    assert!(!allowed(
        "User-agent: *\nDisallow: /%7Euser\n",
        "a",
        "/~user/x"
    ));
    assert!(!allowed(
        "User-agent: *\nDisallow: /~user\n",
        "a",
        "/%7euser/x"
    ));
    assert!(!allowed(
        "User-agent: *\nDisallow: /foo/bar/%62%61%7A\n",
        "a",
        "/foo/bar/baz"
    ));
    // Reserved ones are not: %2F is not '/'.
    assert!(allowed("User-agent: *\nDisallow: /a/b\n", "a", "/a%2Fb"));
    assert!(!allowed("User-agent: *\nDisallow: /a%2fb\n", "a", "/a%2Fb"));
    // Path case matters; escape hex case does not.
    assert!(allowed(
        "User-agent: *\nDisallow: /Private\n",
        "a",
        "/private"
    ));
}

#[test]
fn s5_escaped_star_and_dollar_are_literals() {
    let r = "User-agent: *\nDisallow: /path/file-with-a-%2A.html\nDisallow: /path/foo-%24\n";
    assert!(!allowed(r, "a", "/path/file-with-a-*.html"));
    assert!(allowed(r, "a", "/path/file-with-a-b.html"));
    assert!(!allowed(r, "a", "/path/foo-$"));
    assert!(allowed(r, "a", "/path/foo-"));
    // The URL may write them encoded too, in either hex case: still the same octet.
    assert!(!allowed(r, "a", "/path/file-with-a-%2A.html"));
    assert!(!allowed(r, "a", "/path/file-with-a-%2a.html"));
    assert!(!allowed(r, "a", "/path/foo-%24"));
    let r = "User-agent: *\nDisallow: /price%24\nDisallow: /star%2A/\nDisallow: /mid$x\n";
    for url in [
        "/price$",
        "/price%24",
        "/star*/a",
        "/star%2A/a",
        "/star%2a/b",
        "/mid%24x",
    ] {
        assert!(!allowed(r, "a", url), "{url}");
    }
    // An encoded `*` in the URL is a literal, never a wildcard of the rule.
    assert!(allowed(r, "a", "/starX/a"));
    // A byte-identical rule and path always match, also for an Allow.
    let r = "User-agent: *\nDisallow: /\nAllow: /price%24\nAllow: /q%2A%24$\n";
    assert!(allowed(r, "a", "/price%24"));
    assert!(allowed(r, "a", "/price$"));
    assert!(allowed(r, "a", "/q%2A%24"));
    assert!(allowed(r, "a", "/q*$"));
}

#[test]
fn s5_other_reserved_escapes_match_when_both_sides_encode_them() {
    for c in [
        "%3A", "%40", "%21", "%26", "%27", "%28", "%29", "%2B", "%2C", "%3B", "%3D", "%2F", "%3F",
        "%23", "%5B", "%5D", "%25",
    ] {
        let lower = c.to_ascii_lowercase();
        for (rule, url) in [(c, c), (c, lower.as_str()), (lower.as_str(), c)] {
            let robots = format!("User-agent: *\nDisallow: /a{rule}b\n");
            assert!(
                !allowed(&robots, "a", &format!("/a{url}b")),
                "{rule} vs {url}"
            );
        }
    }
}

#[test]
fn s5_dot_segments_are_resolved_before_matching() {
    let r = "User-agent: *\nDisallow: /private\n";
    assert!(!allowed(r, "a", "/public/../private/x"));
    assert!(!allowed(r, "a", "/%2e%2e/private"));
    assert!(!allowed(r, "a", "/./private"));
}

#[test]
fn s5_wildcards_and_anchor() {
    let r = "User-agent: *\nDisallow: /*.php$\nDisallow: /fish*.php\n";
    assert!(!allowed(r, "a", "/x/y.php"));
    assert!(allowed(r, "a", "/x/y.php?q"));
    assert!(!allowed(r, "a", "/fishheads/catfish.php?p"));
    assert!(!allowed("User-agent: *\nDisallow: /*\n", "a", "/"));
    assert!(!allowed("User-agent: *\nDisallow: *\n", "a", "/anything"));
}

#[test]
fn s5_longest_match_wins_allow_on_ties() {
    let r = "User-agent: *\nAllow: /p\nDisallow: /\n";
    assert!(allowed(r, "a", "/page"));
    let r = "User-agent: *\nAllow: /folder\nDisallow: /folder\n";
    assert!(allowed(r, "a", "/folder/page"));
    let r = "User-agent: *\nAllow: /page\nDisallow: /*.htm\n";
    assert!(!allowed(r, "a", "/page.htm"));
    let r = "User-agent: *\nAllow: /$\nDisallow: /\n";
    assert!(allowed(r, "a", "/"));
    assert!(!allowed(r, "a", "/page"));
    // Tie with wildcards: allow.
    let r = "User-agent: *\nDisallow: /*.a\nAllow: /x*a\n";
    assert!(allowed(r, "a", "/x.a"));
    // The reference parser's index.html example.
    let r = "User-agent: *\nAllow: /allowed-slash/index.html\nDisallow: /\n";
    assert!(allowed(r, "a", "/allowed-slash/"));
    assert!(!allowed(r, "a", "/allowed-slash/index.htm"));
    assert!(allowed(r, "a", "/allowed-slash/index.html"));
    assert!(!allowed(r, "a", "/anyother-url"));
}

#[test]
fn s5_robots_txt_is_always_allowed() {
    let r = "User-agent: *\nDisallow: /\n";
    assert!(allowed(r, "a", "/robots.txt"));
    assert!(allowed(r, "a", "/robots.txt?x=1"));
    assert!(!allowed(r, "a", "/robots.txt.bak"));
    assert!(!allowed(r, "a", "/sub/robots.txt"));
}

#[test]
fn s5_verdict_names_rule_line_and_group() {
    let robots = RobotsTxt::parse(b"# c\nUser-agent: *\nAllow: /a\nDisallow: /a/b\n");
    let verdict = robots.check(&["x"], "http://h/a/b/c");
    assert!(!verdict.allowed);
    let rule = verdict.rule().expect("a rule decided");
    assert_eq!(
        (rule.kind, &*rule.pattern, rule.line, rule.group_line),
        (RuleKind::Disallow, "/a/b", 4, 2)
    );
    assert_eq!(
        verdict.to_string(),
        "Disallow: /a/b (line 4), group at line 2"
    );
    assert_eq!(robots.check(&["x"], "/z").reason, Reason::NoMatchingRule);
    assert_eq!(
        RobotsTxt::parse(b"").check(&["x"], "/z").reason,
        Reason::NoGroup
    );
}

#[test]
fn s5_many_rules_agree_with_brute_force() {
    // The trie must pick the same rule as trying every rule and keeping the best.
    let patterns = [
        "/", "/a", "/a/", "/a/b", "/a/b$", "/*b", "/*b$", "/a*c", "*c", "/a/*/c", "/ab", "/b",
        "/a/b/c", "/*.html", "/a*", "/%61",
    ];
    let mut body = String::from("User-agent: *\n");
    for (i, p) in patterns.iter().enumerate() {
        let kind = if i % 3 == 0 { "Allow" } else { "Disallow" };
        body.push_str(&format!("{kind}: {p}\n"));
    }
    let robots = RobotsTxt::parse(body.as_bytes());
    let paths = [
        "/", "/a", "/a/", "/a/b", "/a/b/", "/a/b/c", "/ab", "/abc", "/b", "/x/b", "/x.html",
        "/a/x/c", "/c", "/a/bc",
    ];
    for path in paths {
        let mut best: Option<(u32, bool, usize)> = None;
        for (i, p) in patterns.iter().enumerate() {
            let compiled = pattern::compile(p.as_bytes());
            if compiled.pattern.matches(path.as_bytes()) {
                let cand = (compiled.pattern.priority, i % 3 == 0, i);
                if best.is_none_or(|b| (cand.0, cand.1) > (b.0, b.1)) {
                    best = Some(cand);
                }
            }
        }
        let expected = best.is_none_or(|b| b.1);
        assert_eq!(robots.check(&["x"], path).allowed, expected, "{path}");
    }
}

// ---- §6 extensions --------------------------------------------------------------------

#[test]
fn s6_crawl_delay_per_group() {
    let r = "User-agent: a\nCrawl-delay: 0.5\nUser-agent: *\nDisallow: /x\nCrawl-delay: 4.5\nCrawl-delay: -1\nCrawl-delay: soon\n";
    let robots = RobotsTxt::parse(r.as_bytes());
    assert_eq!(robots.crawl_delay(robots.group_for(&["a"])), Some(0.5));
    assert_eq!(robots.crawl_delay(robots.group_for(&["b"])), Some(4.5));
    let robots = RobotsTxt::parse(b"User-agent: a\nCrawl-delay: nope\n");
    assert_eq!(robots.crawl_delay(robots.group_for(&["a"])), None);
    assert_eq!(robots.crawl_delay(robots.group_for(&["z"])), None);
}

#[test]
fn s6_sitemaps_host_clean_param() {
    let r = "Sitemap: http://a/1.xml\nUser-agent: *\nHost: 1.2.3.4\nHost: main.example.com\nHost: second.example.com\nSite-map: http://a/2.xml\nClean-param: ref&sid /books/\nDisallow: /x\n";
    let robots = RobotsTxt::parse(r.as_bytes());
    assert_eq!(
        robots.sitemaps().collect::<Vec<_>>(),
        ["http://a/1.xml", "http://a/2.xml"]
    );
    assert_eq!(robots.host(), Some("main.example.com"));
    assert_eq!(robots.clean_params()[0].params, ["ref", "sid"]);
    assert_eq!(robots.clean_params()[0].path.as_deref(), Some("/books/"));
    assert!(!robots.check(&["q"], "/x").allowed);
}

#[test]
fn parsed_form_is_shareable() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<RobotsTxt>();
}
