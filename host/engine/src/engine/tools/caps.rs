//! What a run's calls wrote (for the repeat guard, the write count and the changed-files
//! list) and the cap on a result's size as the model is shown it.

/// What a run's calls wrote.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    /// Files written or deleted, workspace-relative, in order of first write.
    pub files: Vec<String>,
    /// Calls that wrote at least one file.
    pub writes: u64,
}

impl Changes {
    /// Note the files one call wrote (a call that wrote nothing changes nothing).
    pub fn note(&mut self, written: Vec<String>) {
        if !written.is_empty() {
            self.writes += 1;
        }
        for w in written {
            if !self.files.contains(&w) {
                self.files.push(w);
            }
        }
    }
}

/// `text` cut to `n` bytes (on a character boundary) with a marker.
pub(crate) fn cap(text: &str, n: usize) -> String {
    if text.len() <= n {
        return text.to_string();
    }
    let end = text.floor_char_boundary(n);
    format!(
        "{}\n[... kiln: result cut at {n} of {} bytes; the full text is in the store ...]",
        &text[..end],
        text.len()
    )
}
