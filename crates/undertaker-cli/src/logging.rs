//! undertaker's log lines on stderr: `LEVEL message key=value …`, one per event.
//!
//! undertaker logs events and never opens spans, so a subscriber needs no span
//! registry. tracing-subscriber's `fmt` keeps one anyway (a sharded slab with a slot
//! array for 4 096 threads, about 32 KiB of heap allocated at start-up), and every
//! guardian and sentinel would carry it for the life of its tree
//! (docs/BENCHMARKS.md, "Memory per tree").

use std::fmt::Write as _;
use std::io::Write as _;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// The level `UNDERTAKER_LOG` asks for: a level name (`debug`), or `target=level`
/// directives separated by commas, of which the most verbose level counts (undertaker
/// logs from its own crates only). Anything unreadable means the default, `warn`.
pub fn level(spec: Option<&str>) -> LevelFilter {
    spec.and_then(|spec| {
        spec.split(',')
            .filter_map(|d| {
                let level = d.rsplit('=').next()?.trim();
                // FromStr reads "" as ERROR; an empty directive is no directive.
                (!level.is_empty()).then(|| level.parse::<LevelFilter>().ok())?
            })
            .max()
    })
    .unwrap_or(LevelFilter::WARN)
}

/// Installs the stderr logger at `max`. A failed install (one already set) is ignored.
pub fn init(max: LevelFilter) {
    let _ = tracing::subscriber::set_global_default(StderrLog { max });
}

/// Writes each enabled event as one line to stderr. A guardian must never die of its
/// own logging (a host that closed the read end of our stderr pipe, a full disk
/// behind a redirect): every failed write is dropped.
struct StderrLog {
    max: LevelFilter,
}

impl Subscriber for StderrLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // Spans are not used; every one gets the same inert id.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let _ = std::io::stderr().write_all(line(event).as_bytes());
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// `TIME LEVEL message key=value …\n`: the UTC time to the millisecond, the level
/// right-aligned to five characters, and the message first, wherever the macro put it.
fn line(event: &Event<'_>) -> String {
    format!(
        "{} {}",
        crate::clock::utc(crate::clock::now_ms()),
        text(event)
    )
}

/// `LEVEL message key=value …\n`, without the time.
fn text(event: &Event<'_>) -> String {
    let mut fields = Fields::default();
    event.record(&mut fields);
    format!(
        "{:>5}{}{}\n",
        level_name(*event.metadata().level()),
        fields.message,
        fields.rest
    )
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    }
}

/// An event's message (` text`) and its other fields (` key=value` each).
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        // A message reads as text, and so does a plain word; other strings are quoted
        // (escaped: they may come from whoever started a tree).
        let plain = !value.is_empty()
            && (value.chars()).all(|c| c.is_ascii_graphic() && c != '"' && c != '\\');
        match field.name() {
            "message" => self.record_debug(field, &format_args!("{value}")),
            _ if plain => self.record_debug(field, &format_args!("{value}")),
            _ => self.record_debug(field, &value),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = match field.name() {
            "message" => write!(self.message, " {value:?}"),
            name => write!(self.rest, " {name}={value:?}"),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_reads_names_and_directives() {
        assert_eq!(level(None), LevelFilter::WARN);
        assert_eq!(level(Some("debug")), LevelFilter::DEBUG);
        assert_eq!(level(Some("undertaker=trace")), LevelFilter::TRACE);
        assert_eq!(level(Some("info,undertaker=debug")), LevelFilter::DEBUG);
        assert_eq!(level(Some("off")), LevelFilter::OFF);
        assert_eq!(level(Some("nonsense")), LevelFilter::WARN);
        assert_eq!(level(Some("")), LevelFilter::WARN);
    }

    /// Captures the line of one event, as the subscriber would write it.
    struct Capture(std::sync::Mutex<Vec<String>>, LevelFilter);

    impl Subscriber for Capture {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            *metadata.level() <= self.1
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            self.0.lock().unwrap().push(line(event));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn a_line_is_level_message_and_fields() {
        let capture = std::sync::Arc::new(Capture(Default::default(), LevelFilter::WARN));
        tracing::subscriber::with_default(capture.clone(), || {
            tracing::warn!(
                pid = 42,
                signal = "SIGTERM",
                label = "a b",
                "refused {}",
                "here"
            );
            tracing::error!("cannot remove cgroup");
            tracing::info!("not shown at warn");
        });
        let lines: Vec<String> = (capture.0.lock().unwrap().iter())
            .map(|l| {
                // `2026-12-06T04:17:07.001Z `: the time first.
                let (time, rest) = l.split_at(25);
                assert!(time.starts_with("20") && time.ends_with("Z "), "{l}");
                rest.to_owned()
            })
            .collect();
        assert_eq!(
            lines,
            [
                " WARN refused here pid=42 signal=SIGTERM label=\"a b\"\n",
                "ERROR cannot remove cgroup\n"
            ]
        );
    }
}
