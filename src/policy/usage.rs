//! The usage verdict: a site's preferences ([`crate::robots::Usage`]) judged for the
//! purposes a crawler declared, under the operator's `usage` settings.
//!
//! For each declared purpose: `n` refuses, `y` allows, and a purpose the site states
//! nothing about is decided by `usage.unknown`. The request is refused when every
//! declared purpose is (`usage.refuse_when: all`, the default: what is fetched is still
//! usable for the others, and `X-Robots-Usage` says which) or when any is (`any`).
//! Only requests robots.txt allows are judged (aipref attach §3: a disallowed path has
//! no usage preferences).

use crate::config::{Purpose, RefuseWhen, UnknownUsage, UsageConfig, UsageMode};
use crate::robots::{Preference, Purposes, Statement, Usage, UsageSource};

/// The usage check one request gets: what it is for and how a refusal is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageCheck {
    /// The declared purposes; none: no check.
    pub purposes: Purposes,
    /// Enforce, report or off.
    pub mode: UsageMode,
    /// How an unstated purpose counts.
    pub unknown: UnknownUsage,
    /// How the purposes' verdicts combine.
    pub refuse_when: RefuseWhen,
    /// A TDMRep reservation binds this request (its declared purposes that are text
    /// and data mining, combined as `refuse_when` says).
    pub tdm_bound: bool,
}

/// One declared purpose's verdict, and the statement behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PurposeVerdict {
    /// The purpose.
    pub purpose: Purpose,
    /// What the site states for it.
    pub preference: Preference,
    /// Refused, after `usage.unknown`.
    pub refused: bool,
    /// The robots.txt line of the statement, when one stated it.
    pub line: Option<u32>,
    /// The statement's rule, when one stated it.
    pub source: Option<UsageSource>,
}

/// The verdict for all of a request's declared purposes: small, `Copy`, owned (it
/// outlives the robots.txt snapshot it was judged on, to mark the response).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageVerdict {
    /// One verdict per purpose the request declared.
    verdicts: [Option<PurposeVerdict>; 3],
    /// The request is refused (before `mode`: report mode forwards it anyway).
    pub refused: bool,
    /// A TDMRep reservation binds the request: in this mode.
    tdm: Option<UsageMode>,
}

impl UsageCheck {
    /// The check for `purposes` under `config`, in `mode`.
    pub fn new(purposes: Purposes, mode: UsageMode, config: &UsageConfig) -> UsageCheck {
        let declared = purposes.iter().count();
        let bound = purposes
            .iter()
            .filter(|p| config.tdm_purposes.contains(p))
            .count();
        UsageCheck {
            purposes,
            mode,
            unknown: config.unknown,
            refuse_when: config.refuse_when,
            tdm_bound: bound > 0
                && match config.refuse_when {
                    RefuseWhen::All => bound == declared,
                    RefuseWhen::Any => true,
                },
        }
    }

    /// When a TDMRep reservation binds the request: the usage mode it is judged in.
    pub fn tdm(&self) -> Option<UsageMode> {
        (self.tdm_bound && self.mode != UsageMode::Off).then_some(self.mode)
    }

    /// Is there anything to judge?
    pub fn active(&self) -> bool {
        !self.purposes.is_empty() && self.mode != UsageMode::Off
    }

    /// Judges what applies to a path.
    pub fn judge(&self, usage: &Usage<'_>) -> UsageVerdict {
        let mut verdict = UsageVerdict {
            tdm: self.tdm_bound.then_some(self.mode),
            ..UsageVerdict::default()
        };
        let (mut refused, mut judged) = (0, 0);
        for (slot, purpose) in verdict.verdicts.iter_mut().zip(self.purposes.iter()) {
            let (preference, rule) = usage.preference(purpose);
            let refuses = match preference {
                Preference::Refuse => true,
                Preference::Allow => false,
                Preference::Unknown => self.unknown == UnknownUsage::Refuse,
            };
            judged += 1;
            refused += usize::from(refuses);
            *slot = Some(PurposeVerdict {
                purpose,
                preference,
                refused: refuses,
                line: rule.map(|r| r.line),
                source: match rule {
                    Some(rule) => Some(rule.source),
                    None if usage.overflowed() && preference == Preference::Refuse => {
                        Some(UsageSource::TooManyRules)
                    }
                    None => None,
                },
            });
        }
        verdict.refused = judged > 0
            && match self.refuse_when {
                RefuseWhen::All => refused == judged,
                RefuseWhen::Any => refused > 0,
            };
        verdict
    }
}

impl UsageVerdict {
    /// When a TDMRep reservation binds the request: the usage mode it is handled in
    /// (`enforce`: its answer withheld; `report`: marked).
    pub fn tdm(&self) -> Option<UsageMode> {
        self.tdm.filter(|m| *m != UsageMode::Off)
    }

    /// Each declared purpose's verdict, in [`Purpose::ALL`] order.
    pub fn purposes(&self) -> impl Iterator<Item = &PurposeVerdict> {
        self.verdicts.iter().flatten()
    }

    /// When the request is refused, the purpose the refusal names: the first refused.
    pub fn refusal(&self) -> Option<&PurposeVerdict> {
        self.purposes().find(|v| v.refused).filter(|_| self.refused)
    }

    /// The `X-Robots-Usage` value (an RFC 9651 Dictionary): each declared purpose's
    /// stated preference (`y`, `n`, `unknown`) with the line and rule it comes from,
    /// e.g. `train-ai=n;line=4;source=content-usage, search=unknown`.
    pub fn header(&self) -> String {
        let mut out = String::with_capacity(128);
        for v in self.purposes() {
            if !out.is_empty() {
                out.push_str(", ");
            }
            out.push_str(v.purpose.label());
            out.push('=');
            out.push_str(v.preference.token());
            if let Some(line) = v.line {
                out.push_str(";line=");
                out.push_str(itoa::Buffer::new().format(line));
            }
            if let Some(source) = v.source {
                out.push_str(";source=");
                out.push_str(source.label());
            }
        }
        out
    }
}

/// An origin's `Content-Usage` or `Content-Signal` response header (`source`), as
/// `X-Robots-Usage` marks it: `origin-content-usage="train-ai=n"` (the value as an RFC
/// 9651 String: printable ASCII, `"` and `\` escaped, anything else dropped, at most 256
/// octets).
pub fn origin_header_member(source: UsageSource, value: &[u8]) -> String {
    let mut out = format!("origin-{}=\"", source.label());
    for &b in value.iter().take(256) {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => {}
        }
    }
    out.push('"');
    out
}

/// The purposes an origin's `source` response header states (`y`/`n`), for the metrics.
pub fn header_statements(
    source: UsageSource,
    value: &[u8],
) -> impl Iterator<Item = (Purpose, Preference)> {
    let statement = Statement::parse(source, value);
    Purpose::ALL
        .into_iter()
        .map(move |p| (p, statement.preference(p)))
        .filter(|(_, pref)| *pref != Preference::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robots::{CanonicalPath, RobotsTxt};

    fn verdict(robots: &str, path: &str, purposes: &[Purpose], config: &str) -> UsageVerdict {
        let config: UsageConfig = serde_yaml::from_str(config).expect("usage config");
        let robots = RobotsTxt::parse(robots.as_bytes());
        let usage = robots.usage(
            robots.usage_group_for(&["x"]),
            &CanonicalPath::from_url(path),
        );
        let check = UsageCheck::new(
            purposes.iter().copied().collect(),
            UsageMode::Enforce,
            &config,
        );
        check.judge(&usage)
    }

    const SIGNAL: &str = "User-agent: *\nContent-Signal: search=yes, ai-train=no\n";

    #[test]
    fn refused_when_every_declared_purpose_is() {
        let v = verdict(SIGNAL, "/p", &[Purpose::TrainAi], "{}");
        assert!(v.refused);
        assert_eq!(v.header(), "train-ai=n;line=2;source=content-signal");
        let v = verdict(SIGNAL, "/p", &[Purpose::Search, Purpose::TrainAi], "{}");
        assert!(!v.refused, "still usable for search");
        assert_eq!(
            v.header(),
            "search=y;line=2;source=content-signal, train-ai=n;line=2;source=content-signal"
        );
        let v = verdict(
            SIGNAL,
            "/p",
            &[Purpose::Search, Purpose::TrainAi],
            "refuse_when: any",
        );
        assert!(v.refused);
        assert_eq!(v.refusal().map(|p| p.purpose), Some(Purpose::TrainAi));
    }

    #[test]
    fn unknown_follows_the_configuration() {
        let v = verdict(SIGNAL, "/p", &[Purpose::AiInput], "{}");
        assert!(!v.refused);
        assert_eq!(v.header(), "ai-input=unknown");
        assert!(verdict(SIGNAL, "/p", &[Purpose::AiInput], "unknown: refuse").refused);
        // An unreadable statement is unknown too.
        let bad = "User-agent: *\nContent-Usage: train-ai=N\n";
        assert!(!verdict(bad, "/p", &[Purpose::TrainAi], "{}").refused);
        assert!(verdict(bad, "/p", &[Purpose::TrainAi], "unknown: refuse").refused);
        // No purpose declared: nothing to judge, nothing refused.
        assert!(!verdict(SIGNAL, "/p", &[], "unknown: refuse").refused);
    }

    #[test]
    fn origin_headers() {
        assert_eq!(
            origin_header_member(UsageSource::ContentUsage, b"train-ai=n, x=\"q\"\x01"),
            r#"origin-content-usage="train-ai=n, x=\"q\"""#
        );
        let stated: Vec<_> =
            header_statements(UsageSource::ContentSignal, b"search=yes, ai-train=no").collect();
        assert_eq!(
            stated,
            [
                (Purpose::Search, Preference::Allow),
                (Purpose::TrainAi, Preference::Refuse)
            ]
        );
    }
}
