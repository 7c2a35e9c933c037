//! Properties of the engine over generated input: any bytes parse without panicking, and
//! the compiled matcher agrees with a naive longest-match oracle written independently.

use proptest::prelude::*;
use robotsgate::robots::{CanonicalPath, RobotsTxt};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_bytes_parse_and_decide(body in proptest::collection::vec(any::<u8>(), 0..2048),
                                  url in ".{0,64}") {
        let robots = RobotsTxt::parse(&body);
        let _ = robots.check(&["agent", "*"], &url);
        let _ = robots.crawl_delay(robots.group_for(&["agent"]));
    }

    #[test]
    fn robots_like_text_parses_and_decides(
        lines in proptest::collection::vec(
            (prop_oneof![Just("user-agent"), Just("allow"), Just("disallow"), Just("crawl-delay"),
                         Just("sitemap"), Just("host"), Just("clean-param"), Just("dissalow"), Just("x")],
             "[ -~\u{80}-\u{10ffff}]{0,24}"), 0..40),
        url in "[/a-z%*$?.#0-9]{0,40}") {
        let body: String = lines.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
        let robots = RobotsTxt::parse(body.as_bytes());
        let verdict = robots.check(&["a"], &url);
        if let Some(rule) = verdict.rule() {
            prop_assert!(rule.line as usize <= lines.len());
        }
    }

    #[test]
    fn canonical_form_is_a_fixed_point(raw in "[/a-zA-Z0-9%.?#*$~ \u{e9}-]{0,40}") {
        // What the proxy forwards must decode to what was matched: normalising the
        // canonical form again may not change it.
        let once = CanonicalPath::new(&raw);
        let twice = CanonicalPath::new(once.as_str());
        prop_assert_eq!(once.as_str(), twice.as_str());
    }

    #[test]
    fn matcher_agrees_with_naive_oracle(
        rules in proptest::collection::vec((any::<bool>(), "/[ab/*]{0,6}[$]?"), 1..12),
        path in "/[ab/]{0,10}") {
        let body = star_group(&rules);
        let robots = RobotsTxt::parse(body.as_bytes());
        let expected = oracle(&rules, &path);
        prop_assert_eq!(robots.check(&["x"], &path).allowed, expected, "{}", body);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Usage rules (`Content-Usage`, `Content-Signal`) never change what robots.txt
    /// allows: the file with them interleaved anywhere decides every path exactly as the
    /// file without them, for every agent (so a usage verdict, judged only on allowed
    /// paths, can never turn a disallow into an allow).
    #[test]
    fn usage_rules_never_change_the_allow_verdict(
        lines in proptest::collection::vec(prop_oneof![
            prop_oneof![Just("a"), Just("b"), Just("*")].prop_map(|a| format!("User-agent: {a}")),
            (any::<bool>(), "/[ab/*]{0,5}[$]?").prop_map(|(allow, p)| {
                format!("{}: {p}", if allow { "Allow" } else { "Disallow" })
            }),
            Just("Crawl-delay: 1".to_string()),
        ], 0..16),
        usage in proptest::collection::vec((0usize..17, prop_oneof![
            "Content-Usage: (/[ab/*]{0,4} )?(train-ai|search)=[yn]",
            "Content-Signal: (search|ai-train|ai-input)=(yes|no)(, use=reference)?",
            "content-usage:[ -~]{0,12}",
        ]), 0..6),
        agent in prop_oneof![Just("a"), Just("b"), Just("c")],
        path in "/[ab/]{0,8}") {
        let plain = lines.join("\n");
        let mut mixed = lines.clone();
        for (at, line) in &usage {
            mixed.insert((*at).min(mixed.len()), line.clone());
        }
        let mixed = mixed.join("\n");
        let without = RobotsTxt::parse(plain.as_bytes());
        let with = RobotsTxt::parse(mixed.as_bytes());
        prop_assert_eq!(
            without.check(&[agent], &path).allowed,
            with.check(&[agent], &path).allowed,
            "{}\n---\n{}", plain, mixed
        );
        prop_assert_eq!(
            without.crawl_delay(without.group_for(&[agent])),
            with.crawl_delay(with.group_for(&[agent]))
        );
    }

    /// A small group is scanned, a large one walks a trie: the same rules decide the same
    /// way either way (the same rule, by its line), escapes and anchors included. The
    /// second file is the first plus rules that never match, enough to get a trie.
    #[test]
    fn scanned_and_trie_groups_decide_alike(
        rules in proptest::collection::vec((any::<bool>(), "/?[ab/$*]{0,5}(%2[Aa4]|%24|%61)?[ab$]{0,2}"), 1..8),
        path in "/[ab/$*]{0,6}(%2A|%24|%61|\\*|[$])?[ab]{0,3}") {
        let small = star_group(&rules);
        let mut large = small.clone();
        for i in 0..9 {
            large.push_str(&format!("Disallow: /~never{i}\n"));
        }
        let (small_robots, large_robots) = (RobotsTxt::parse(small.as_bytes()), RobotsTxt::parse(large.as_bytes()));
        let (a, b) = (small_robots.check(&["x"], &path), large_robots.check(&["x"], &path));
        prop_assert_eq!(a.allowed, b.allowed, "{}", small);
        prop_assert_eq!(a.rule().map(|r| r.line), b.rule().map(|r| r.line), "{}", small);
    }
}

/// A robots.txt of one `User-agent: *` group with these rules (allow?, pattern).
fn star_group(rules: &[(bool, String)]) -> String {
    let mut body = String::from("User-agent: *\n");
    for (allow, pattern) in rules {
        body.push_str(if *allow { "Allow: " } else { "Disallow: " });
        body.push_str(pattern);
        body.push('\n');
    }
    body
}

/// Longest matching pattern wins, allow on ties, no match allows (SPEC §5), by brute force.
fn oracle(rules: &[(bool, String)], path: &str) -> bool {
    let mut best: Option<(usize, bool)> = None;
    for (allow, pattern) in rules {
        if glob(pattern.as_bytes(), path.as_bytes()) {
            let cand = (pattern.len(), *allow);
            if best.is_none_or(|b| cand > b) {
                best = Some(cand);
            }
        }
    }
    best.is_none_or(|b| b.1)
}

/// Does `pattern` match a prefix of `path` (`*` any run, final `$` = end of path)?
fn glob(pattern: &[u8], path: &[u8]) -> bool {
    match pattern {
        [] => true,
        [b'$'] => path.is_empty(),
        [b'*', rest @ ..] => (0..=path.len()).any(|i| glob(rest, &path[i..])),
        [c, rest @ ..] => path.first() == Some(c) && glob(rest, &path[1..]),
    }
}
