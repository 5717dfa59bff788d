//! The generator's random source and the text it writes: prose, code, logs, grep output and
//! base64 images, all from a seeded splitmix64 (see the parent module on determinism).

// ---------------------------------------------------------------------------------------------
// Random source

/// splitmix64: tiny, fast, and good enough for synthetic data.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..hi` (`hi > lo`).
    pub(super) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }

    pub(super) fn usize_in(&mut self, lo: usize, hi: usize) -> usize {
        self.range(lo as u64, hi as u64) as usize
    }

    /// True with probability `1 / n` (never when `n == 0`).
    pub(super) fn one_in(&mut self, n: u32) -> bool {
        n > 0 && self.below(u64::from(n)) == 0
    }

    pub(super) fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    pub(super) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    pub(super) fn pick_str<'a, S: AsRef<str>>(&mut self, items: &'a [S]) -> &'a str {
        self.pick(items).as_ref()
    }

    pub(super) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Roughly standard normal (Irwin-Hall of 12 uniforms), deterministic on every platform.
    pub(super) fn normal(&mut self) -> f64 {
        (0..12).map(|_| self.unit()).sum::<f64>() - 6.0
    }

    /// A log-normal size: `2^(median_log2 + sigma_log2 * z)`, computed without `exp`.
    pub(super) fn log_normal(&mut self, median_log2: f64, sigma_log2: f64, max: usize) -> usize {
        let x = (median_log2 + sigma_log2 * self.normal()).clamp(0.0, 40.0);
        let whole = x.floor();
        let frac = x - whole;
        // 2^frac on [0, 1) to within 0.3%.
        let pow_frac = 1.0 + frac * (0.656_5 + 0.343_5 * frac);
        (((1u64 << whole as u32) as f64 * pow_frac) as usize).min(max)
    }
}

/// A bijection on u32, so sequential counters become unique random-looking ids.
pub(super) fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

// ---------------------------------------------------------------------------------------------
// Text

pub(super) const WORDS: &[&str] = &[
    "the",
    "a",
    "to",
    "of",
    "and",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "this",
    "we",
    "should",
    "when",
    "file",
    "function",
    "test",
    "value",
    "error",
    "returns",
    "because",
    "then",
    "parser",
    "session",
    "entry",
    "token",
    "budget",
    "cache",
    "branch",
    "summary",
    "context",
    "call",
    "path",
    "config",
    "handle",
    "result",
    "fails",
    "passes",
    "instead",
    "before",
    "after",
    "keep",
    "change",
    "move",
    "check",
    "build",
    "index",
    "line",
    "buffer",
    "offset",
    "length",
    "first",
    "last",
    "next",
    "previous",
    "empty",
    "missing",
    "overflow",
    "input",
    "output",
    "module",
    "struct",
    "field",
    "type",
    "trait",
    "async",
    "lock",
    "thread",
    "queue",
    "request",
    "response",
    "timeout",
    "retry",
    "fallback",
    "layout",
    "schema",
    "version",
    "migration",
    "still",
    "only",
    "also",
    "never",
    "always",
    "maybe",
    "probably",
    "now",
    "again",
    "here",
];

pub(super) const IDENTS: &[&str] = &[
    "entry", "parent", "leaf", "tokens", "cut", "index", "budget", "path", "buf", "line", "reader",
    "writer", "state", "config", "opts", "ctx", "msg", "msgs", "summary", "usage", "result",
    "count", "total", "window", "reserve", "keep", "offset", "len", "cursor", "node", "tree",
    "child", "children", "id", "ids", "cache", "map", "key", "value", "item", "items", "span",
];

pub(super) const TYPES: &[&str] = &[
    "Entry",
    "Session",
    "Usage",
    "Message",
    "Content",
    "String",
    "Vec<u8>",
    "Path",
    "Settings",
    "Budget",
    "CutPoint",
    "TokenCounter",
    "Summary",
    "Tree",
    "Node",
    "Error",
    "u64",
    "usize",
];

pub(super) const MODULES: &[&str] = &[
    "session",
    "tokens",
    "compaction",
    "summarize",
    "engine",
    "rpc",
    "settings",
    "store",
    "tree",
    "context",
    "prune",
    "prompt",
    "util",
    "io",
    "cli",
];

pub(super) const CRATES: &[&str] = &[
    "serde",
    "serde_json",
    "tokio",
    "memchr",
    "clap",
    "tracing",
    "anyhow",
    "thiserror",
    "bytes",
    "regex",
    "futures",
    "tempfile",
    "reqwest",
    "hyper",
    "rustls",
];

/// Appends `lo..hi` words.
pub(super) fn push_words(rng: &mut Rng, out: &mut String, lo: usize, hi: usize) {
    let n = rng.usize_in(lo, hi);
    for i in 0..n {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(rng.pick_str(WORDS));
    }
}

/// Prose of about `bytes` bytes: sentences, paragraphs, the odd `identifier` and path.
pub(super) fn prose(rng: &mut Rng, out: &mut String, bytes: usize, files: &[String]) {
    let end = out.len() + bytes.max(8);
    let mut in_paragraph = 0;
    while out.len() < end {
        if in_paragraph > 0 {
            out.push(' ');
        }
        let start = out.len();
        push_words(rng, out, 5, 16);
        if let Some(c) = out[start..].chars().next() {
            let upper = c.to_ascii_uppercase();
            out.replace_range(start..start + 1, upper.encode_utf8(&mut [0; 4]));
        }
        match rng.below(8) {
            0 => {
                out.push_str(" in `");
                out.push_str(rng.pick_str(files));
                out.push('`');
            }
            1 => {
                out.push_str(" with `");
                out.push_str(rng.pick_str(IDENTS));
                out.push_str("()`");
            }
            _ => {}
        }
        out.push('.');
        in_paragraph += 1;
        if in_paragraph > rng.usize_in(2, 6) {
            out.push_str("\n\n");
            in_paragraph = 0;
        }
    }
}

/// Source-code-like text of about `bytes` bytes, optionally with `cat -n` style line numbers.
pub(super) fn code(rng: &mut Rng, out: &mut String, bytes: usize, numbered: bool) {
    let end = out.len() + bytes.max(1);
    let mut line_no = rng.range(1, 400);
    let mut depth = 0usize;
    while out.len() < end {
        if numbered {
            out.push_str(&format!("{line_no:>6}\t"));
        }
        line_no += 1;
        for _ in 0..depth.min(4) {
            out.push_str("    ");
        }
        match rng.below(12) {
            0 if depth == 0 => {
                out.push_str("use ");
                out.push_str(rng.pick_str(CRATES));
                out.push_str("::");
                out.push_str(rng.pick_str(TYPES));
                out.push(';');
            }
            0..=1 => {
                out.push_str("pub fn ");
                out.push_str(rng.pick_str(IDENTS));
                out.push('_');
                out.push_str(rng.pick_str(IDENTS));
                out.push_str("(&self, ");
                out.push_str(rng.pick_str(IDENTS));
                out.push_str(": &");
                out.push_str(rng.pick_str(TYPES));
                out.push_str(") -> Result<");
                out.push_str(rng.pick_str(TYPES));
                out.push_str(", Error> {");
                depth += 1;
            }
            2..=5 => {
                out.push_str("let ");
                out.push_str(rng.pick_str(IDENTS));
                out.push_str(" = ");
                out.push_str(rng.pick_str(IDENTS));
                out.push('.');
                out.push_str(rng.pick_str(IDENTS));
                out.push('(');
                out.push_str(rng.pick_str(IDENTS));
                out.push_str(")?;");
            }
            6 => {
                out.push_str("// ");
                push_words(rng, out, 3, 12);
            }
            7 => {
                out.push_str("if ");
                out.push_str(rng.pick_str(IDENTS));
                out.push_str(" > ");
                out.push_str(&rng.below(10_000).to_string());
                out.push_str(" {");
                depth += 1;
            }
            8 if depth > 0 => {
                out.push('}');
                depth -= 1;
            }
            9 => {}
            _ => {
                out.push_str(rng.pick_str(IDENTS));
                out.push_str(".push(\"");
                push_words(rng, out, 1, 5);
                out.push_str("\");");
            }
        }
        out.push('\n');
    }
}

/// Build/test/log output of about `bytes` bytes.
pub(super) fn log_output(rng: &mut Rng, out: &mut String, bytes: usize, files: &[String]) {
    let end = out.len() + bytes.max(1);
    while out.len() < end {
        match rng.below(10) {
            0..=1 => {
                out.push_str("   Compiling ");
                out.push_str(rng.pick_str(CRATES));
                out.push_str(&format!(
                    " v{}.{}.{}",
                    rng.below(3),
                    rng.below(40),
                    rng.below(20)
                ));
            }
            2..=5 => {
                out.push_str("test ");
                out.push_str(rng.pick_str(MODULES));
                out.push_str("::tests::");
                out.push_str(rng.pick_str(IDENTS));
                out.push('_');
                out.push_str(rng.pick_str(IDENTS));
                out.push_str(if rng.one_in(30) {
                    " ... FAILED"
                } else {
                    " ... ok"
                });
            }
            6 => {
                out.push_str("warning: unused variable: `");
                out.push_str(rng.pick_str(IDENTS));
                out.push_str("`\n  --> ");
                out.push_str(rng.pick_str(files));
                out.push_str(&format!(":{}:{}", rng.range(1, 900), rng.range(1, 80)));
            }
            7 => {
                out.push_str(&format!(
                    "2026-01-01T{:02}:{:02}:{:02}Z INFO {}: ",
                    rng.below(24),
                    rng.below(60),
                    rng.below(60),
                    rng.pick_str(MODULES)
                ));
                push_words(rng, out, 4, 14);
            }
            _ => {
                out.push_str(&format!("{:>8} ", rng.below(1 << 20)));
                push_words(rng, out, 2, 9);
            }
        }
        out.push('\n');
    }
}

/// `grep -n` style output of about `bytes` bytes.
pub(super) fn grep_output(
    rng: &mut Rng,
    out: &mut String,
    bytes: usize,
    files: &[String],
    pattern: &str,
) {
    let end = out.len() + bytes.max(1);
    while out.len() < end {
        out.push_str(rng.pick_str(files));
        out.push_str(&format!(":{}:    let ", rng.range(1, 2000)));
        out.push_str(pattern);
        out.push_str(" = ");
        out.push_str(rng.pick_str(IDENTS));
        out.push_str("();\n");
    }
}

pub(super) const BASE64: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Base64 text that looks like a PNG, `len` rounded up to a multiple of 4.
pub(super) fn fake_png_base64(rng: &mut Rng, len: usize) -> String {
    let mut s = String::with_capacity(len + 4);
    s.push_str("iVBORw0KGgoAAAANSUhEUgAA");
    while s.len() < len || !s.len().is_multiple_of(4) {
        let mut r = rng.next();
        for _ in 0..10 {
            s.push(BASE64[(r & 63) as usize] as char);
            r >>= 6;
        }
    }
    s.truncate(len.max(24).next_multiple_of(4));
    s
}
