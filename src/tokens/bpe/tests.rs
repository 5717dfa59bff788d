//! Every count against tiktoken-rs's, on generated text that mixes the characters the
//! patterns treat differently, on this repository's own prose and code, and on long runs.

use proptest::prelude::*;

use super::*;

fn tiktoken(which: &str) -> &'static tiktoken_rs::CoreBPE {
    static O200K: OnceLock<tiktoken_rs::CoreBPE> = OnceLock::new();
    static CL100K: OnceLock<tiktoken_rs::CoreBPE> = OnceLock::new();
    match which {
        "o200k" => O200K.get_or_init(|| tiktoken_rs::o200k_base().expect("loads")),
        _ => CL100K.get_or_init(|| tiktoken_rs::cl100k_base().expect("loads")),
    }
}

fn vocabularies() -> [(&'static str, &'static Vocab); 2] {
    [("o200k", o200k()), ("cl100k", cl100k())]
}

#[track_caller]
fn assert_same(text: &str) {
    for (name, vocab) in vocabularies() {
        let expected = tiktoken(name).encode_ordinary(text).len();
        assert_eq!(vocab.count(text), expected, "{name} on {text:?}");
    }
}

#[test]
fn every_token_is_tiktoken_s_and_is_found_by_its_own_bytes() {
    for (name, vocab) in vocabularies() {
        let lookup = vocab.lookup();
        for rank in 0..lookup.len() {
            let bytes = lookup.token(rank);
            assert_eq!(lookup.rank(bytes), Some(rank as u32), "{name} rank {rank}");
            let expected = tiktoken(name).decode_bytes(&[rank as u32]).expect("a rank");
            assert_eq!(bytes, expected.as_slice(), "{name} rank {rank}");
        }
        assert_eq!(lookup.rank(b"\xff\xfe not a token at all \x00"), None);
        assert_eq!(lookup.rank(b""), None);
    }
}

#[test]
fn the_patterns_compile() {
    for (_, vocab) in vocabularies() {
        vocab.splitter();
    }
}

#[test]
fn known_texts_count_like_tiktoken() {
    for text in [
        "",
        "hello world",
        "  leading and trailing  ",
        "tabs\tand\r\nCRLF\r\n\r\n  \n",
        "He's I'M they'RE we'Ve you'll it'd ſ'S",
        "日本語のテキストと English mixed 123456789 ١٢٣",
        "emoji 😀👍🏽 and ZWJ 👨‍👩‍👧 and flags 🇫🇷",
        "combining e\u{301} a\u{308}\u{301} ab\u{0300}CD\u{0301}ef",
        "   \u{a0}\u{3000}x\u{2003} \u{2028}y",
        "fn main() { println!(\"{}\", x + 1); } // comment",
        "https://example.com/a/b?c=d&e=f#g  /path/to/file.rs:12:5",
        "a/b//c///\n///\r\n",
        "$$$ ... !!! ??? --- +++ ===",
        "x \n y  \n\n z   w",
    ] {
        assert_same(text);
    }
}

#[test]
fn the_repository_s_own_text_counts_like_tiktoken() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "README.md",
        "docs/robustness.md",
        "src/session/file.rs",
        "Cargo.toml",
    ] {
        let text = std::fs::read_to_string(root.join(file)).expect("a repository file");
        for chunk in text.as_bytes().chunks(3000) {
            assert_same(&String::from_utf8_lossy(chunk));
        }
    }
}

#[test]
fn long_runs_count_like_tiktoken() {
    for text in [
        " ".repeat(5000),
        " ".repeat(5000) + "x",
        "a".repeat(3000),
        "ab".repeat(2000),
        "\n".repeat(3000),
        "0123456789".repeat(300),
        "!".repeat(3000),
        "é".repeat(2000),
    ] {
        assert_same(&text);
    }
}

/// A million spaces: tiktoken-rs's regex overflows its stack on them whole, so the counter
/// cuts text into chunks (tiktoken.rs); chunk by chunk, the counts are tiktoken-rs's.
#[test]
fn a_million_spaces_count_like_tiktoken_chunk_by_chunk() {
    use crate::tokens::{Bpe, Tiktoken, TokenCounter};
    let text = " ".repeat(1 << 20) + "end";
    let counter = Tiktoken::new(Bpe::O200k);
    let mut expected = 0;
    let mut rest = text.as_str();
    while !rest.is_empty() {
        // The chunking of tiktoken.rs: at most 2048 bytes, cut before the last whitespace
        // that is not the first character.
        let mut end = rest.len().min(2048);
        if end < rest.len()
            && let Some(cut) = rest[..end].rfind(char::is_whitespace).filter(|&i| i > 0)
        {
            end = cut;
        }
        expected += tiktoken("o200k").encode_ordinary(&rest[..end]).len() as u64;
        rest = &rest[end..];
    }
    assert_eq!(counter.count_text(&text), expected);
    assert!(expected > 0);
}

fn piece_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => proptest::sample::select(vec![' ', ' ', '\n', '\r', '\t', '\u{a0}', '\u{3000}', '\u{2028}']),
        4 => proptest::char::range('a', 'z'),
        2 => proptest::char::range('A', 'Z'),
        2 => proptest::char::range('0', '9'),
        2 => proptest::sample::select(vec!['\'', '\'', '.', ',', '/', '(', ')', '{', '-', '_', '"', '!', '#']),
        1 => proptest::sample::select(vec!['s', 't', 'd', 'm', 'S', 'T', 'ſ', 'K', 'k']),
        1 => proptest::sample::select(vec!['é', 'ß', 'Ω', 'ж', 'Ж', '日', 'ア', '١', 'Ⅻ', '\u{301}', '\u{308}', '😀', '\u{200d}', 'ǅ', 'ʰ']),
        1 => any::<char>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]
    #[test]
    fn generated_text_counts_like_tiktoken(chars in proptest::collection::vec(piece_char(), 0..120)) {
        let text: String = chars.into_iter().collect();
        for (name, vocab) in vocabularies() {
            let expected = tiktoken(name).encode_ordinary(&text).len();
            prop_assert_eq!(vocab.count(&text), expected, "{} on {:?}", name, text);
        }
    }
}
