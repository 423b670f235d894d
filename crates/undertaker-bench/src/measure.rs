//! Contenders, interleaved rounds, and what one measurement reports.

use crate::stats::{interleaving, ratio, summarize, Summary};
use serde::Serialize;
use std::collections::BTreeMap;

/// One try of one contender.
pub enum Attempt {
    Sample(f64),
    /// The contender cannot run here (tool not installed, tier not built): not a failure.
    Unavailable(String),
    /// The contender should have run and did not: a bench or product bug.
    Failed(String),
}

pub struct Contender<'a> {
    pub name: String,
    pub run: Box<dyn FnMut() -> Attempt + 'a>,
}

impl<'a> Contender<'a> {
    pub fn new(name: impl Into<String>, run: impl FnMut() -> Attempt + 'a) -> Self {
        Contender {
            name: name.into(),
            run: Box::new(run),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Measured,
    Unavailable,
    Failed,
}

#[derive(Debug, Clone, Serialize)]
pub struct ContenderResult {
    pub name: String,
    pub state: State,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// Median of this contender / median of each available anchor.
    pub ratios: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    pub key: String,
    /// What exactly is measured, in one sentence.
    pub what: String,
    pub unit: &'static str,
    /// Tree size, background processes or guardians, where the measurement has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<usize>,
    pub rounds: usize,
    pub anchors: Vec<String>,
    pub contenders: Vec<ContenderResult>,
}

impl Measurement {
    pub fn contender(&self, name: &str) -> Option<&ContenderResult> {
        self.contenders.iter().find(|c| c.name == name)
    }

    pub fn median(&self, name: &str) -> Option<f64> {
        self.contender(name)?.summary.map(|s| s.median)
    }

    pub fn failed(&self) -> impl Iterator<Item = &ContenderResult> {
        self.contenders
            .iter()
            .filter(|c| matches!(c.state, State::Failed))
    }
}

/// Static facts of a measurement, before it runs.
pub struct Spec {
    pub key: String,
    pub what: String,
    pub unit: &'static str,
    pub size: Option<usize>,
    pub rounds: usize,
    pub anchors: Vec<&'static str>,
}

/// Runs every contender once untimed (warm-up and availability probe), then `rounds`
/// interleaved timed rounds. A contender that turns out unavailable or fails is
/// skipped from then on.
pub fn run(spec: Spec, mut contenders: Vec<Contender<'_>>) -> Measurement {
    let k = contenders.len();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); k];
    let mut stopped: Vec<Option<(State, String)>> = vec![None; k];
    for (i, c) in contenders.iter_mut().enumerate() {
        match (c.run)() {
            Attempt::Sample(_) => {}
            Attempt::Unavailable(r) => stopped[i] = Some((State::Unavailable, r)),
            Attempt::Failed(r) => stopped[i] = Some((State::Failed, r)),
        }
    }
    for i in interleaving(k, spec.rounds) {
        if stopped[i].is_some() {
            continue;
        }
        match (contenders[i].run)() {
            Attempt::Sample(v) => samples[i].push(v),
            Attempt::Unavailable(r) => stopped[i] = Some((State::Unavailable, r)),
            Attempt::Failed(r) => stopped[i] = Some((State::Failed, r)),
        }
    }
    let mut results: Vec<ContenderResult> = contenders
        .iter()
        .zip(samples)
        .zip(stopped)
        .map(|((c, s), stop)| {
            let (state, reason) = match stop {
                Some((state, r)) => (state, Some(r)),
                None => (State::Measured, None),
            };
            ContenderResult {
                name: c.name.clone(),
                summary: match state {
                    State::Measured => summarize(&s),
                    _ => None,
                },
                state,
                reason,
                ratios: BTreeMap::new(),
            }
        })
        .collect();
    let anchor_medians: Vec<(String, f64)> = spec
        .anchors
        .iter()
        .filter_map(|a| {
            let m = results.iter().find(|c| c.name == *a)?.summary?.median;
            Some((a.to_string(), m))
        })
        .collect();
    for r in &mut results {
        if let Some(s) = r.summary {
            for (a, m) in &anchor_medians {
                if let Some(x) = ratio(s.median, *m) {
                    r.ratios.insert(a.clone(), x);
                }
            }
        }
    }
    Measurement {
        key: spec.key,
        what: spec.what,
        unit: spec.unit,
        size: spec.size,
        rounds: spec.rounds,
        anchors: spec.anchors.iter().map(|a| a.to_string()).collect(),
        contenders: results,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn interleaved_unavailable_and_ratios() {
        let log = RefCell::new(Vec::new());
        let contenders = vec![
            Contender::new("a", || {
                log.borrow_mut().push('a');
                Attempt::Sample(2.0)
            }),
            Contender::new("b", || {
                log.borrow_mut().push('b');
                Attempt::Sample(4.0)
            }),
            Contender::new("gone", || Attempt::Unavailable("not installed".into())),
        ];
        let spec = Spec {
            key: "k".into(),
            what: "w".into(),
            unit: "µs",
            size: None,
            rounds: 2,
            anchors: vec!["a", "gone"],
        };
        let m = run(spec, contenders);
        // Warm-up a b, then round 1: a b, round 2 starts at b: b a.
        assert_eq!(log.borrow().iter().collect::<String>(), "ababba");
        assert_eq!(m.median("b"), Some(4.0));
        assert_eq!(m.contender("b").unwrap().ratios.get("a"), Some(&2.0));
        assert!(!m.contender("b").unwrap().ratios.contains_key("gone"));
        assert!(matches!(
            m.contender("gone").unwrap().state,
            State::Unavailable
        ));
        assert_eq!(m.failed().count(), 0);
    }
}
