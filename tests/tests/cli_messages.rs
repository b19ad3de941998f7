//! Black-box tests of what the CLI's messages say: hints that name the actual Mozart home,
//! counts that agree in number, the dashboard keys of `mozart config`, and `validate`'s
//! reports of duplicate keys and of every unknown field.

use mozart_tests::{stdout, TestEnv};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn instruments_check_hint_names_the_actual_mozart_home() {
    let env = TestEnv::new();
    let out = env.mozart(&["instruments", "check", "no-such-instrument"]);
    assert_eq!(out.status.code(), Some(1));
    let text = format!("{}{}", stdout(&out), stderr(&out));
    let want = format!("Add profiles to {}/instruments/", env.home.display());
    assert!(text.contains(&want), "no {want:?} in:\n{text}");
    assert!(
        !text.contains("~/.mozart"),
        "a hint names ~/.mozart:\n{text}"
    );
}
