//! A group's facts as a claim keeps them in Redis: `last_end|paused_until|backoff`,
//! the two moments in Redis' milliseconds (`0`: none), the backoff in milliseconds.
//! The owner writes them as they happen (`own_record`) and as it lets a key go
//! (`own_release`); a new owner reads them from its claim's answer. Both directions go
//! through [`Words`], and the model's specification reads and writes them through it
//! too (`model/spec/agree.rs`, `agree_standing.rs`).
//!
//! What cannot be read counts against the reader: words that are not exactly three
//! non-negative integers are [`Unreadable`], and the new owner then takes the last
//! exchange to have ended as it read them (`ownership`'s `group_facts`), so the
//! Crawl-delay counts from then, never from nothing.

/// A group's facts in Redis' milliseconds, as a claim keeps them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Words {
    /// When the group's last exchange ended (Redis ms).
    pub last_end: Option<i64>,
    /// Until when no request may start (Redis ms).
    pub paused_until: Option<i64>,
    /// The backoff in force, in milliseconds.
    pub backoff_ms: u64,
}

/// Facts whose words are not three non-negative integers separated by `|`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable(pub String);

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unreadable facts {:?}", self.0)
    }
}

impl Words {
    /// Reads `value`, strictly: three non-negative integers, `|` between them.
    pub fn parse(value: &str) -> Result<Words, Unreadable> {
        let unreadable = || Unreadable(value.chars().take(64).collect());
        let mut fields = value.split('|');
        let mut next = || {
            fields
                .next()
                .filter(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|f| f.parse::<u64>().ok())
        };
        let (last_end, paused_until, backoff_ms) = (next(), next(), next());
        let (Some(last_end), Some(paused_until), Some(backoff_ms), None) =
            (last_end, paused_until, backoff_ms, next())
        else {
            return Err(unreadable());
        };
        let moment = |ms: u64| -> Result<Option<i64>, Unreadable> {
            let ms = i64::try_from(ms).map_err(|_| unreadable())?;
            Ok((ms > 0).then_some(ms))
        };
        Ok(Words {
            last_end: moment(last_end)?,
            paused_until: moment(paused_until)?,
            backoff_ms,
        })
    }

    /// The words a claim keeps (a moment before Redis' epoch, or none, is `0`).
    pub fn write(&self) -> String {
        let ms = |t: Option<i64>| t.filter(|&t| t > 0).unwrap_or(0);
        format!(
            "{}|{}|{}",
            ms(self.last_end),
            ms(self.paused_until),
            self.backoff_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_read_back_what_was_written() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..10_000 {
            let moment = |n: u64| (n % 3 != 0).then_some((n >> 2) as i64 & i64::MAX);
            let words = Words {
                last_end: moment(next()).filter(|&t| t > 0),
                paused_until: moment(next()).filter(|&t| t > 0),
                backoff_ms: next() % 1_000_000,
            };
            assert_eq!(Words::parse(&words.write()), Ok(words), "{words:?}");
        }
    }

    #[test]
    fn what_is_not_three_non_negative_integers_is_unreadable() {
        for bad in [
            "",
            "1|2",
            "1|2|3|4",
            "-1|0|0",
            "1|-2|0",
            "1|0|-3",
            "a|0|0",
            "1| 2|0",
            "+1|0|0",
            "1|0|",
            "||",
            "9223372036854775808|0|0",
            "99999999999999999999|0|0",
            "1.5|0|0",
            "1|0|0\n",
        ] {
            assert!(Words::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Words::parse("0|0|0"), Ok(Words::default()), "zero is none");
        assert_eq!(Words::parse("7|8|9").map(|w| w.write()), Ok("7|8|9".into()));
    }
}
