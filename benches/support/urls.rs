//! Deterministic URLs aimed at a robots.txt's rules, shared by the criterion benchmark and
//! the `baseline_check` example (so both measure the same work).
//!
//! For every rule pattern of the file, URLs that hit it (wildcards filled in, `$` honoured
//! or broken on purpose), near misses and unrelated paths, in a fixed pseudo-random order.

/// xorshift64*: tiny and reproducible; no `rand` dependency for benchmark inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const WORDS: &[&str] = &[
    "news",
    "2024",
    "article",
    "item",
    "amp",
    "print",
    "page",
    "x",
    "en",
    "video",
    "shop",
    "index.html",
    "a.pdf",
    "b.php",
    "c.json",
    "edit",
    "private",
    "search",
];

fn word(rng: &mut Rng) -> &'static str {
    WORDS[rng.below(WORDS.len())]
}

/// `count` URLs on `origin` aimed at the `Allow`/`Disallow` patterns in `robots`.
pub fn urls_for(robots: &str, origin: &str, count: usize, seed: u64) -> Vec<String> {
    let patterns: Vec<String> = robots
        .lines()
        .filter_map(|l| {
            let l = l.split('#').next()?.trim();
            let (k, v) = l.split_once(':')?;
            let k = k.trim().to_ascii_lowercase();
            (k == "allow" || k == "disallow").then(|| v.trim().to_string())
        })
        .filter(|p| !p.is_empty())
        .collect();
    let mut rng = Rng::new(seed);
    let mut urls = Vec::with_capacity(count);
    while urls.len() < count {
        let mut path = String::new();
        match rng.below(10) {
            // Unrelated path.
            0 | 1 => {
                for _ in 0..1 + rng.below(4) {
                    path.push('/');
                    path.push_str(word(&mut rng));
                }
            }
            // A rule's pattern, filled in.
            _ => {
                let p = &patterns[rng.below(patterns.len())];
                let anchored = p.ends_with('$');
                for part in p.trim_end_matches('$').split('*').enumerate() {
                    if part.0 > 0 {
                        path.push_str(word(&mut rng));
                    }
                    path.push_str(part.1);
                }
                if !anchored || rng.below(4) == 0 {
                    match rng.below(3) {
                        0 => {}
                        1 => {
                            path.push_str(word(&mut rng));
                        }
                        _ => {
                            path.push_str("?id=");
                            path.push_str(&rng.below(1000).to_string());
                        }
                    }
                }
                if !path.starts_with('/') {
                    path.insert(0, '/');
                }
            }
        }
        urls.push(format!("{origin}{path}"));
    }
    urls
}
