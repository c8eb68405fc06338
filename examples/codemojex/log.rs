//! The program's log: `RUST_LOG` (default `warn`) on stderr, each distinct
//! warning once. A warning the cache repeats while a link reconnects (twice
//! a second, say) is counted, not printed again; the last one is kept, so
//! that a failure can say what went wrong. While `--serve` draws its live
//! board, the log goes to a file instead, so that no line breaks the board.

use std::collections::HashSet;
use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, filter::FilterExt};

/// What the log saw; one per process.
#[derive(Default)]
struct State {
    /// Every distinct warning printed: its callsite and text.
    printed: HashSet<(tracing::callsite::Identifier, String)>,
    /// Warnings not printed because they were printed before.
    repeats: u64,
    /// Warnings (and errors) seen, printed or not.
    warnings: u64,
    /// The text of the last warning.
    last: Option<String>,
    /// Where the log goes instead of stderr, if anywhere.
    file: Option<(PathBuf, File)>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> MutexGuard<'static, Option<State>> {
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Installs the log as the process's `tracing` subscriber; `ansi` colours
/// it.
pub fn install(ansi: bool) {
    *state() = Some(State::default());
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(|| Sink)
        .with_ansi(ansi)
        .with_filter(filter.and(Once));
    tracing_subscriber::registry().with(layer).init();
}

/// The text of the last warning, if the log is installed and saw one.
pub fn last_warning() -> Option<String> {
    state().as_ref()?.last.clone()
}

/// Warnings seen so far, and how many of them were repeats not printed.
pub fn warnings() -> (u64, u64) {
    state()
        .as_ref()
        .map_or((0, 0), |state| (state.warnings, state.repeats))
}

/// Sends the log to the file at `path` (created anew) until
/// [`to_stderr`].
///
/// # Errors
///
/// When the file cannot be created, or the log is not installed.
pub fn to_file(path: &Path) -> io::Result<()> {
    let mut state = state();
    let state = state
        .as_mut()
        .ok_or_else(|| io::Error::other("the log is not installed"))?;
    state.file = Some((path.to_owned(), File::create(path)?));
    Ok(())
}

/// Sends the log to stderr again; returns the file it went to, if any.
pub fn to_stderr() -> Option<PathBuf> {
    Some(state().as_mut()?.file.take()?.0)
}

/// Where a log line is written: the file, when one is set, or stderr.
struct Sink;

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match state().as_mut().and_then(|state| state.file.as_mut()) {
            Some((_, file)) => file.write(buf),
            None => io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match state().as_mut().and_then(|state| state.file.as_mut()) {
            Some((_, file)) => file.flush(),
            None => io::stderr().flush(),
        }
    }
}

/// Lets each distinct warning through once; counts the repeats.
struct Once;

impl<S: Subscriber> Filter<S> for Once {
    fn enabled(&self, _: &tracing::Metadata<'_>, _: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        if *event.metadata().level() > Level::WARN {
            return true;
        }
        let mut text = Text::default();
        event.record(&mut text);
        let mut state = state();
        let Some(state) = state.as_mut() else {
            return true;
        };
        state.warnings += 1;
        state.last = Some(text.message);
        let new = state
            .printed
            .insert((event.metadata().callsite(), text.fields));
        if !new {
            state.repeats += 1;
        }
        new
    }
}

/// An event's message, and its fields but the count of occurrences (which
/// the cache's own rate-limited warnings carry, and which changes).
#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => {
                self.message = format!("{value:?}");
                let _ = write!(self.fields, " {value:?}");
            }
            "occurrences" => {}
            name => {
                let _ = write!(self.fields, " {name}={value:?}");
            }
        }
    }
}
