//! "Did you mean …?": the known word a misspelt one most likely meant.

/// The candidate that `word` most likely misspells, if one is close enough:
/// the same word in another case, a word that contains it or that it
/// contains (`ttl` for `ttl_ms`), or one a few edits away (`jiter`).
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    if let Some(same) = candidates.iter().find(|c| c.eq_ignore_ascii_case(&word)) {
        return Some(same);
    }
    if word.len() >= 3 {
        let part = candidates
            .iter()
            .find(|c| c.contains(word.as_str()) || word.contains(**c));
        if let Some(part) = part {
            return Some(part);
        }
    }
    let most = (word.len() / 3).max(1);
    candidates
        .iter()
        .map(|c| (distance(&word, c), *c))
        .filter(|&(d, _)| d <= most)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// The Levenshtein distance between `a` and `b`, in bytes.
fn distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.as_bytes().iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &y) in b.iter().enumerate() {
            let replace = diagonal + usize::from(x != y);
            diagonal = row[j + 1];
            row[j + 1] = replace.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::{closest, distance};

    const KEYS: &[&str] = &["kind", "ttl_ms", "coherence", "jitter", "name", "crate"];

    #[test]
    fn measures_edits() {
        assert_eq!(distance("jiter", "jitter"), 1);
        assert_eq!(distance("krate", "crate"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn guesses_what_was_meant() {
        assert_eq!(closest("ttl", KEYS), Some("ttl_ms"));
        assert_eq!(closest("jiter", KEYS), Some("jitter"));
        assert_eq!(closest("krate", KEYS), Some("crate"));
        assert_eq!(closest("coherency", KEYS), Some("coherence"));
        assert_eq!(closest("table_name", KEYS), Some("name"));
        assert_eq!(closest("Kind", KEYS), Some("kind"));
        assert_eq!(closest("colour", KEYS), None);
        assert_eq!(closest("expire", KEYS), None);
    }
}
