//! The mistakes of a declaration, reported in the order of the source.

/// Where a mistake is: the attribute as a whole (a missing key), one of
/// its entries (by position in the list), or the item below it. Mistakes
/// are reported in this order, which is the order of the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum At {
    Attribute,
    Entry(usize),
    Item,
}

/// Every mistake found, each with where it is.
#[derive(Default)]
pub(crate) struct Errors(Vec<(At, syn::Error)>);

impl Errors {
    pub(crate) fn push(&mut self, at: At, error: syn::Error) {
        self.0.push((at, error));
    }

    /// The value, or `None` after recording the error.
    pub(crate) fn check<T>(&mut self, at: At, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(at, error)).ok()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The mistakes in the order of the source; those at one place in the
    /// order they were found.
    pub(crate) fn into_sorted(mut self) -> Vec<syn::Error> {
        self.0.sort_by_key(|&(at, _)| at);
        self.0.into_iter().map(|(_, error)| error).collect()
    }
}
