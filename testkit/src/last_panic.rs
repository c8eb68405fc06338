//! A failing test's panic message, said again after the server logs the
//! fixtures print as they drop: the logs follow the message, and a CI log
//! that keeps only the output's tail would show the logs without it.

use std::cell::RefCell;
use std::sync::Once;

thread_local! {
    /// The message of this thread's last panic, until said again.
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Keeps each panic's message (and place) for [`say_again`], then lets the
/// hook that was there print it as before. Installed once a process.
pub(crate) fn remember() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            LAST.with(|last| *last.borrow_mut() = Some(info.to_string()));
            previous(info);
        }));
    });
}

/// Prints, once, the panic this thread is unwinding from, if any.
pub(crate) fn say_again() {
    if !std::thread::panicking() {
        return;
    }
    if let Some(message) = LAST.with(|last| last.borrow_mut().take()) {
        eprintln!(
            "echo-cache-testkit: the test failed (its panic, again after the logs): {message}"
        );
    }
}
