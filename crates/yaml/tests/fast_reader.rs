//! The fast reader for the block-style subset (`fast.rs`) against yaml-rust2, the reference:
//! wherever the fast reader gives a tree, yaml-rust2 must give the same tree — every value,
//! every line and column — on every YAML file of the repository (scores, examples, test
//! fixtures, built-in instrument profiles), on the upstream corpus when it is on this machine,
//! on the edge cases below, and on thousands of mutations of all of them. Where the fast
//! reader is not sure it gives nothing and `parse` uses yaml-rust2, so agreement on what it
//! does read is the whole of its correctness.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use mozart_yaml::{parse, parse_fast, parse_reference};

/// Compare the fast reader with the reference on `text`; the fast reader's verdict (`true`: it
/// read the text itself).
fn agree(what: &str, text: &str) -> bool {
    let Some(fast) = parse_fast(text) else {
        return false;
    };
    let reference = parse_reference(text);
    // Debug text compares NaN floats as equal and shows every line and column.
    let fast = format!("{fast:#?}");
    match reference {
        Ok(Some(node)) => {
            let reference = format!("{node:#?}");
            if fast != reference {
                let first = fast
                    .lines()
                    .zip(reference.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                let around = |t: &str| {
                    t.lines()
                        .skip(first.saturating_sub(12))
                        .take(16)
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                panic!(
                    "{what}: the fast reader and yaml-rust2 disagree at line {first} of their trees\n\
                     --- fast ---\n{}\n--- reference ---\n{}\n--- text ---\n{text}",
                    around(&fast),
                    around(&reference)
                );
            }
        }
        other => panic!("{what}: the fast reader read what yaml-rust2 gives as {other:?}\n{text}"),
    }
    true
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == ".git")
            {
                continue;
            }
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

/// Every YAML file of the repository, and of the upstream corpus when this machine has it.
fn corpus() -> Vec<(String, String)> {
    let root = repo_root();
    let mut paths = Vec::new();
    for dir in ["tests", "examples", "scores", "crates", "docs"] {
        yaml_files(&root.join(dir), &mut paths);
    }
    // The upstream scores (read-only, outside the repository); the repository's own copies
    // above are what CI checks.
    yaml_files(Path::new("/work/shared/corpus"), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            Some((p.display().to_string(), text))
        })
        .collect()
}

#[test]
fn the_corpus_score_and_most_files_take_the_fast_path_and_agree() {
    let files = corpus();
    assert!(files.len() >= 40, "only {} YAML files found", files.len());
    let mut fast = Vec::new();
    let mut slow = Vec::new();
    for (name, text) in &files {
        if agree(name, text) {
            fast.push(name.clone());
        } else {
            slow.push(name.clone());
        }
    }
    eprintln!(
        "{} of {} files read by the fast reader; left to yaml-rust2:\n  {}",
        fast.len(),
        files.len(),
        slow.join("\n  ")
    );
    // The score `mozart-bench` times `validate` on must not fall back.
    assert!(
        fast.iter()
            .any(|n| n.ends_with("tests/bench/iterative-dev-loop.yaml")),
        "the 516-sheet corpus score left the fast path"
    );
    assert!(
        fast.len() * 2 > files.len(),
        "most files should take the fast path: {} of {}",
        fast.len(),
        files.len()
    );
}

/// Small texts at the edges of the subset; those marked `true` must be read by the fast
/// reader (so this test checks the reader, not only its giving up).
const CASES: &[(bool, &str)] = &[
    (true, "a: 1\nb: two\nc: 'three'\nd: \"four\"\n"),
    (true, "a: yes\nb: Off\nc: 012\nd: 0x1F\ne: 1_000\nf: 1:30\ng: 1.5\nh: .inf\ni: ~\nj: 2024-01-01\nk: null\nl: -3\n"),
    (true, "a:\n  b:\n    c: 1\n  d: 2\ne: 3\n"),
    (true, "a:\n- 1\n- 2\nb:\n  - x\n  - y\n"),
    (true, "- a: 1\n  b: 2\n- c: 3\n- plain\n- 'q'\n"),
    (true, "a: one\n  two\n\n  three\n\n\n  four\nb: x\n"),
    (true, "a: 'one\n  two''s\n\n  three  '\nb: \"x\n   y\"\n"),
    (true, "t: |\n  line 1\n    indented\n\n  line 3\nu: x\n"),
    (true, "t: >\n  folded\n  text\n\n  para\n    kept\n  back\nu: x\n"),
    (true, "a: |-\n  x\n\n\nb: |+\n  y\n\n\nc: >2\n   three\nd: |1-\n  two\n"),
    (true, "a: |\n  x\n  y"),
    (true, "a: |+\n  x\n\n"),
    (true, "a: >-\n\n  x\n\n"),
    (false, "a: |\n\n   \n  x\n"),
    (true, "a: |\n\n  \n   x\n"),
    (true, "a: [1, 'b', \"c\", d e]\nb: {x: 1, 'y': [2, 3]}\nc: []\nd: {}\n"),
    (true, "# top\na: 1 # trailing\n# between\n  # indented comment\nb: # after key\n  c: 2\n"),
    (true, "a: 1\na: 2\n1: x\n1.0: y\ntrue: z\n"),
    (true, "base: {x: 1, y: 2}\nother:\n  <<: {x: 3}\n  y: 4\n"),
    (true, "ключ: значение\nb:\n  é: ü ü\n  f:\n  - x: 1\n"),
    (true, "k: v:w\nurl: http://x.y/z\nc: a#b\nd: -x\ne: ?x\nf: :x\n"),
    (true, "a:   spaced   \nb: x  # c\n"),
    (false, "seq:\n- - 1\n"),
    (true, "a: 'x' # c\nb: [1] # c\n"),
    (true, "- |\n  block in seq\n- >-\n  folded\n  in seq\n"),
    (true, "a:\n  - b: |\n      deep\n    c: 1\n"),
    (false, "a: &x 1\nb: *x\n"),
    (false, "a: !!str 1\n"),
    (false, "---\na: 1\n"),
    (false, "a: 1\n...\n"),
    (false, "%YAML 1.1\n---\na: 1\n"),
    (false, "a:\tb\n"),
    (false, "a: 1\r\nb: 2\r\n"),
    (false, "a:\nb: 1\n"),
    (true, "a: \"esc\\n \\t \\\\ \\\" \\x41 \\u00e9 \\U0001F600 \\N \\_ \\/ \\ \"\n"),
    (true, "a: \"joined\\\n   line  \\\n\n  after\"\nb: \"sp  \\\n x\"\n"),
    (true, "- {name: a, n: 1}\n- { name: \"b\", n: 2 }\n- [x, [y, z]]\n"),
    (false, "a: \"bad \\q\"\n"),
    (false, "a: \"bad \\x4\"\n"),
    (false, "a: [1,\n  2]\n"),
    (false, "a: b: c\n"),
    (false, "a: 1\n b: 2\n"),
    (false, "a:\n    b: 1\n  c: 2\n"),
    (false, "a: 'unterminated\n"),
    (false, "? complex\n: key\n"),
    (false, "scalar root\n"),
    (false, ""),
    (false, "# nothing\n"),
    (false, "a: x\n  b: y\n"),
    (false, "a: 'x'y\n"),
    (false, "a: [1, 2,]\n"),
    (false, "a: |0\n  x\n"),
    (false, "a: x\n- y\n"),
    (false, "- a\nb: 1\n"),
    (false, "\u{feff}a: 1\n"),
];

#[test]
fn edge_cases_agree_and_the_subset_is_read() {
    for (i, (must_read, text)) in CASES.iter().enumerate() {
        let read = agree(&format!("case {i}"), text);
        if *must_read {
            assert!(read, "case {i} should be read by the fast reader:\n{text}");
        }
        if !read {
            // `parse` then answers exactly as yaml-rust2 does.
            assert_eq!(
                format!("{:?}", parse(text)),
                format!("{:?}", parse_reference(text)),
                "case {i}"
            );
        }
    }
}

#[test]
fn deep_nesting_is_left_to_yaml_rust2() {
    // The fast reader recurses per level; past its limit it must give up, not overflow the
    // stack of a small thread.
    let deep_flow = format!("a: {}1{}\n", "[".repeat(5_000), "]".repeat(5_000));
    let deep_block: String = (0..3_000)
        .map(|i| format!("{}k:\n", " ".repeat(i)))
        .chain(std::iter::once(format!("{}k: 1\n", " ".repeat(3_000))))
        .collect();
    let shallow = format!("a: {}1{}\n", "[".repeat(50), "]".repeat(50));
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            assert!(parse_fast(&deep_flow).is_none());
            assert!(parse_fast(&deep_block).is_none());
            assert!(parse_fast(&shallow).is_some());
        })
        .unwrap()
        .join()
        .unwrap();
}

/// A small deterministic generator (no crate for randomness in the tree).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const SNIPPETS: &[&str] = &[
    " ", "  ", "\n", "\n\n", "\n  ", ": ", ":", "- ", "-", "#", " #", "'", "''", "\"", "|", "|-",
    ">", ">+", "[", "]", "{", "}", ",", "x", "a: b", "\n- ", "\n  - ", "\n  k: ", "1", "~", "yes",
    "\\", "é", "&a", "*a", "!", "?", "%", "...", "---",
];

fn char_floor(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// One random edit of `text`: insert a snippet, delete a run, re-indent a line, or repeat one.
fn mutate(rng: &mut Lcg, text: &str) -> String {
    let at = char_floor(text, rng.below(text.len() + 1));
    match rng.below(4) {
        0 => {
            let snippet = SNIPPETS[rng.below(SNIPPETS.len())];
            format!("{}{snippet}{}", &text[..at], &text[at..])
        }
        1 => {
            let end = char_floor(text, (at + 1 + rng.below(8)).min(text.len()));
            format!("{}{}", &text[..at], &text[end..])
        }
        2 => {
            let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let spaces = " ".repeat(rng.below(4));
            if rng.below(2) == 0 {
                format!("{}{spaces}{}", &text[..line_start], &text[line_start..])
            } else {
                let rest = &text[line_start..];
                let trimmed = rest.trim_start_matches(' ');
                let removed = (rest.len() - trimmed.len()).min(1 + rng.below(3));
                format!("{}{}", &text[..line_start], &rest[removed..])
            }
        }
        _ => {
            let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i + 1);
            format!(
                "{}{}{}",
                &text[..line_end],
                &text[line_start..line_end],
                &text[line_end..]
            )
        }
    }
}

/// The first `max` bytes of `text`, cut at a line end.
fn head(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let cut = char_floor(text, max);
    match text[..cut].rfind('\n') {
        Some(i) => &text[..=i],
        None => &text[..cut],
    }
}

#[test]
fn mutations_of_every_file_and_case_agree_wherever_the_fast_reader_reads_them() {
    let mut seeds: Vec<(String, String)> = corpus()
        .into_iter()
        .map(|(name, text)| (name, head(&text, 6_000).to_string()))
        .collect();
    seeds.extend(
        CASES
            .iter()
            .enumerate()
            .map(|(i, (_, text))| (format!("case {i}"), (*text).to_string())),
    );
    let mut rng = Lcg(0x5eed_2026);
    let (mut read, mut total) = (0, 0);
    for (name, text) in &seeds {
        for round in 0..40 {
            let mut mutant = mutate(&mut rng, text);
            if round % 3 == 0 {
                mutant = mutate(&mut rng, &mutant);
            }
            total += 1;
            if agree(&format!("{name}, mutation {round}"), &mutant) {
                read += 1;
            }
        }
    }
    eprintln!("{read} of {total} mutants read by the fast reader, all agreeing");
    // The mutations must exercise the reader, not only its giving up.
    assert!(read * 5 > total, "only {read} of {total} mutants were read");
}
