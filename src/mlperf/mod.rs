//! MLPerf Storage's rules, as ringload checks them: each a line that passes or fails
//! ([`Rule`]), and the figures the rules are stated in ([`datasize`]: how large a training
//! dataset must be). [`training_rules`] checks a training submission's runs,
//! [`checkpoint_rules`] a checkpoint run.
//!
//! Pure arithmetic over numbers the caller gives: nothing here reads a run or a file.

pub mod checkpoint_rules;
pub mod datasize;
pub mod parameters;
pub mod training_rules;

use serde::{Deserialize, Serialize};

/// The outcome of one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    /// The inputs do not say (e.g. the client's memory was neither given nor measured).
    Unknown,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Unknown => "N/A",
        }
    }

    /// `Pass` when `ok`, else `Fail`.
    pub fn of(ok: bool) -> Verdict {
        if ok { Verdict::Pass } else { Verdict::Fail }
    }
}

/// One rule checked: its name (as the rules state it), the verdict, and the figures behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub name: String,
    pub verdict: Verdict,
    pub detail: String,
}

impl Rule {
    pub fn new(name: impl Into<String>, verdict: Verdict, detail: impl Into<String>) -> Rule {
        Rule {
            name: name.into(),
            verdict,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for Rule {
    /// `PASS  name: detail`, one line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<4}  {}: {}",
            self.verdict.word(),
            self.name,
            self.detail
        )
    }
}

/// Whether no rule failed (a rule the inputs could not decide does not fail).
pub fn none_failed(rules: &[Rule]) -> bool {
    rules.iter().all(|r| r.verdict != Verdict::Fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_is_one_line_with_its_verdict_first() {
        let r = Rule::new("AU per run", Verdict::Fail, "run 3: 88.1 % < 90 %");
        assert_eq!(r.to_string(), "FAIL  AU per run: run 3: 88.1 % < 90 %");
        assert!(!none_failed(std::slice::from_ref(&r)));
        let unknown = Rule::new("dataset size", Verdict::Unknown, "no client memory");
        assert_eq!(unknown.to_string(), "N/A   dataset size: no client memory");
        assert!(none_failed(&[unknown, Rule::new("x", Verdict::Pass, "y")]));
    }
}
