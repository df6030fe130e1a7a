//! Seeds: the range a seed must lie in, and lists of seeds as written on the command
//! line and in grid and claims files (`a..b`, b excluded, or `s1,s2,...`).
//!
//! Every file tokensel writes must read back, and TOML (config files, `tokensel config`,
//! the data export's `config.toml`, grid cell hashes) holds signed 64-bit integers only:
//! a seed is at most [`MAX_SEED`] = 2^63 - 1 wherever it enters (flags, config files,
//! trajectories, grid specs, claims), and larger ones are refused as bad input.
//!
//! A list is parsed without being collected ([`SeedList`]), so its length is checked
//! against [`MAX_SEEDS`] before anything is allocated (`0..10000000000` is refused, not
//! collected).

use crate::error::{Error, Result};

/// Largest seed: TOML integers are signed 64-bit, and every config tokensel writes must
/// read back.
pub const MAX_SEED: u64 = i64::MAX as u64;

/// Most seeds one list may name (a sweep, a grid, a claim).
pub const MAX_SEEDS: u64 = 1000;

/// Refuse a seed above [`MAX_SEED`]; `field` names where it came from.
pub fn check(field: &str, seed: u64) -> Result<()> {
    if seed > MAX_SEED {
        return Err(Error::config(field, too_big(seed)));
    }
    Ok(())
}

fn too_big(seed: u64) -> String {
    format!(
        "seed {seed} is above the largest seed {MAX_SEED} = 2^63 - 1 (TOML, which configs \
         are written in, holds signed 64-bit integers)"
    )
}

/// A list of seeds as written: `a..b` (a, a + 1, ..., b - 1) or `s1,s2,...`, each seed
/// at most [`MAX_SEED`], not yet collected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedList {
    /// `a..b`: a, a + 1, ..., b - 1 (a < b).
    Range(u64, u64),
    /// `s1,s2,...`: these seeds in this order (not empty, none twice).
    List(Vec<u64>),
}

impl std::str::FromStr for SeedList {
    type Err = String;

    /// Parse `a..b` (b excluded, a < b) or `s1,s2,...`; the message says what is wrong.
    fn from_str(text: &str) -> std::result::Result<SeedList, String> {
        let bad = || format!("`{text}` is not a seed range a..b or a list s1,s2,...");
        let seed = |s: &str| -> std::result::Result<u64, String> {
            let v = s.trim().parse::<u64>().map_err(|_| bad())?;
            if v > MAX_SEED {
                return Err(format!("`{text}`: {}", too_big(v)));
            }
            Ok(v)
        };
        match text.split_once("..") {
            Some((a, b)) => {
                // b is excluded: it may be MAX_SEED + 1, so that a range reaches MAX_SEED
                let end = |s: &str| -> std::result::Result<u64, String> {
                    let v = s.trim().parse::<u64>().map_err(|_| bad())?;
                    if v > MAX_SEED + 1 {
                        return Err(format!(
                            "`{text}`: {} (the end of a range is excluded: at most 2^63)",
                            too_big(v - 1)
                        ));
                    }
                    Ok(v)
                };
                let (a, b) = (seed(a)?, end(b)?);
                if a >= b {
                    return Err(format!(
                        "`{text}` names no seed (a..b takes a to b - 1; need a < b)"
                    ));
                }
                Ok(SeedList::Range(a, b))
            }
            None => {
                let list = text
                    .split(',')
                    .map(seed)
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                // a seed twice would count one run twice in a share of seeds
                let mut seen = std::collections::BTreeSet::new();
                if let Some(dup) = list.iter().find(|s| !seen.insert(**s)) {
                    return Err(format!("`{text}`: seed {dup} appears twice"));
                }
                Ok(SeedList::List(list))
            }
        }
    }
}

impl SeedList {
    /// How many seeds the list names.
    pub fn len(&self) -> u64 {
        match self {
            SeedList::Range(a, b) => b - a,
            SeedList::List(v) => v.len() as u64,
        }
    }

    /// Whether the list names no seed (never, for a parsed list).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The seeds, in order; a list of more than [`MAX_SEEDS`] is refused (a size over a
    /// limit, named by `field`) before it is collected.
    pub fn seeds(&self, field: &str) -> Result<Vec<u64>> {
        let n = self.len();
        if n > MAX_SEEDS {
            return Err(Error::TooLarge {
                field: field.into(),
                reason: format!("{n} seeds, more than the limit of {MAX_SEEDS}"),
            });
        }
        Ok(match self {
            SeedList::Range(a, b) => (*a..*b).collect(),
            SeedList::List(v) => v.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_lists() {
        let p = |s: &str| s.parse::<SeedList>();
        assert_eq!(p("0..4").unwrap().seeds("s").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(p(" 2 .. 3").unwrap().seeds("s").unwrap(), vec![2]);
        assert_eq!(p("0,3,7").unwrap().seeds("s").unwrap(), vec![0, 3, 7]);
        assert_eq!(p("5").unwrap().seeds("s").unwrap(), vec![5]);
        let top = format!("{MAX_SEED}");
        assert_eq!(p(&top).unwrap().seeds("s").unwrap(), vec![MAX_SEED]);
        for bad in [
            "", "a", "3..3", "4..2", "1,,2", "-1", "0..", "..4", "1..2..3", "0,0", "1,2,1",
        ] {
            assert!(p(bad).is_err(), "{bad}");
        }
        // a repeated seed would be counted twice in a share of seeds (`check --seeds
        // 0,0` reported "2/2 seeds hold" from one run)
        assert!(p("3,1,3").unwrap_err().contains("seed 3 appears twice"));
        let e = p("18446744073709551615").unwrap_err();
        assert!(e.contains("9223372036854775807"), "{e}");
        // the end is excluded: a range may reach MAX_SEED
        let last = p("9223372036854775805..9223372036854775808").unwrap();
        assert_eq!(
            last.seeds("s").unwrap(),
            vec![MAX_SEED - 2, MAX_SEED - 1, MAX_SEED]
        );
        assert!(p("0..9223372036854775809").is_err());
        assert!(p("9223372036854775808..9223372036854775809").is_err());
    }

    /// A huge range is refused by its length, without being collected (collecting
    /// 10^10 seeds would abort on allocation).
    #[test]
    fn huge_ranges_are_refused_before_collection() {
        let l: SeedList = "0..10000000000".parse().unwrap();
        assert_eq!(l.len(), 10_000_000_000);
        let e = l.seeds("seeds").unwrap_err();
        assert!(e.is_stopped_run(), "a size over a limit: {e}");
        assert!(e.to_string().contains("10000000000 seeds"), "{e}");
        assert!(e.to_string().contains("1000"), "{e}");
        let full: SeedList = format!("0..{MAX_SEED}").parse().unwrap();
        assert!(full.seeds("seeds").is_err());
        assert_eq!(
            "0..1000"
                .parse::<SeedList>()
                .unwrap()
                .seeds("s")
                .unwrap()
                .len(),
            1000
        );
        assert!("0..1001".parse::<SeedList>().unwrap().seeds("s").is_err());
    }
}
