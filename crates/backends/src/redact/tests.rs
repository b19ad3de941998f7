use std::borrow::Cow;

use super::{
    is_secret_name, redact, redact_cow, redact_owned, register_env, register_value, words,
};

/// Each case redacted as expected, the same through every entry point, and stable when
/// redacted again.
fn check(cases: &[(&str, &str)]) {
    for (input, want) in cases {
        assert_eq!(redact(input), *want, "input: {input}");
        assert_eq!(redact_owned(input.to_string()), *want, "input: {input}");
        let mut in_place = input.to_string();
        super::redact_in_place(&mut in_place);
        assert_eq!(in_place, *want, "input: {input}");
        assert_eq!(redact(want), *want, "redacting again changed: {want}");
    }
}

#[test]
fn provider_formats_long_and_short() {
    check(&[
        (
            "key sk-ant-api03-abcdefghijklmnop end",
            "key [REDACTED_ANTHROPIC_KEY] end",
        ),
        ("sk-ant-short1", "[REDACTED_ANTHROPIC_KEY]"),
        ("oauth sk-ant-oat01-abcdEFGH", "oauth [REDACTED_ANTHROPIC_KEY]"),
        ("sk-proj-abcdefghijklmnopqrstuvwx", "[REDACTED_OPENAI_KEY]"),
        ("proj key sk-proj-Ab12", "proj key [REDACTED_OPENAI_KEY]"),
        (
            "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH",
            "[REDACTED_OPENAI_KEY]",
        ),
        (
            "router sk-or-v1-0123456789abcdef0123",
            "router [REDACTED_OPENAI_KEY]",
        ),
        (
            "AIzaSyABCDEFGHIJKLMNOPQRSTUVWXYZ0123",
            "[REDACTED_GOOGLE_KEY]",
        ),
        ("id AKIAABCDEFGHIJKLMNOP", "id [REDACTED_AWS_KEY]"),
        ("id ASIAABCDEFGHIJKLMNOP.", "id [REDACTED_AWS_KEY]."),
        (
            "Authorization: Bearer abcdefghijklmnopqrstuvwxyz",
            "Authorization: Bearer [REDACTED_BEARER_TOKEN]",
        ),
        (
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789AB",
            "[REDACTED_GITHUB_TOKEN]",
        ),
        ("gho_abcdefghijklmnopqrst", "[REDACTED_GITHUB_TOKEN]"),
        ("ghs_abcdefghijklmnopqrst", "[REDACTED_GITHUB_TOKEN]"),
        ("ghu_abcdefghijklmnopqrst", "[REDACTED_GITHUB_TOKEN]"),
        (
            "github_pat_11ABCDEFG0abcdefghijkl_mnop",
            "[REDACTED_GITHUB_TOKEN]",
        ),
        ("glpat-abcdefghij0123456789", "[REDACTED_GITLAB_TOKEN]"),
        ("xoxb-1234567890-abcdefghij", "[REDACTED_SLACK_TOKEN]"),
        ("xapp-1-A0123-abcdef", "[REDACTED_SLACK_TOKEN]"),
        ("hf_abcdefghijklmnopqrstuv", "[REDACTED_HF_TOKEN]"),
        ("sk_live_abcdefghijklmnop1234", "[REDACTED_STRIPE_KEY]"),
        ("gsk_abcdefghijklmnopqrstuvwx", "[REDACTED_API_KEY]"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
            "jwt [REDACTED_JWT] ok",
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\nAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\nafter",
            "[REDACTED_PRIVATE_KEY]\nafter",
        ),
        (
            "cut: -----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA",
            "cut: [REDACTED_PRIVATE_KEY]",
        ),
        (
            "git clone https://bob:hunter2@example.com/x.git",
            "git clone https://[REDACTED_CREDENTIALS]@example.com/x.git",
        ),
    ]);
}

#[test]
fn secret_named_values_whatever_the_value() {
    check(&[
        (
            "ANTHROPIC_API_KEY=sk-ant-short1",
            "ANTHROPIC_API_KEY=[REDACTED_ANTHROPIC_KEY]",
        ),
        (
            "MY_SERVICE_TOKEN=hunter2hunter2",
            "MY_SERVICE_TOKEN=[REDACTED]",
        ),
        ("export GH_TOKEN=abc", "export GH_TOKEN=[REDACTED]"),
        (
            "export DB_PASSWORD='p@ss w0rd' next",
            "export DB_PASSWORD='[REDACTED]' next",
        ),
        ("db_pass = s3cr3t;", "db_pass = [REDACTED];"),
        (
            "client_secret: \"abc def\"",
            "client_secret: \"[REDACTED]\"",
        ),
        ("password: letmein", "password: [REDACTED]"),
        ("X-Api-Key: abcd1234", "X-Api-Key: [REDACTED]"),
        (
            "Cookie: session=abc; theme=dark",
            "Cookie: [REDACTED]; theme=dark",
        ),
        (
            "GET https://api.example.com/v1?access_token=abc123&page=2",
            "GET https://api.example.com/v1?access_token=[REDACTED]&page=2",
        ),
        (
            r#"{"api_key": "abc123", "input_tokens": 5, "model": "m"}"#,
            r#"{"api_key": "[REDACTED]", "input_tokens": 5, "model": "m"}"#,
        ),
        (
            r#"{"input":"{\"apiKey\":\"abc123\",\"n\":1}"}"#,
            r#"{"input":"{\"apiKey\":\"[REDACTED]\",\"n\":1}"}"#,
        ),
        ("curl --api-key abc123 url", "curl --api-key [REDACTED] url"),
        ("tool --token=xyz987 go", "tool --token=[REDACTED] go"),
        ("token: 4f9a0b", "token: [REDACTED]"),
        ("GITLAB_PAT=abcdef", "GITLAB_PAT=[REDACTED]"),
    ]);
}

#[test]
fn ordinary_text_is_left_alone() {
    let kept = [
        "nothing secret here: sk-short",
        "Invalid API key: please run /login",
        "Invalid token: expired",
        "max_tokens=4096 input_tokens: 500 output_tokens=12",
        r#"{"type":"result","usage":{"input_tokens":10,"output_tokens":3},"apiKeySource":"none"}"#,
        "AUTHOR=alice MONKEY=banana KEYBOARD=us",
        "SSH_AUTH_SOCK=/tmp/ssh-XXXX/agent.1 TOKEN_COUNT=12 API_KEY_FILE=/etc/key",
        "USE_AUTH=true REQUIRE_TOKEN=1 API_KEY=$API_KEY TOKEN=${TOKEN}",
        "PATH=/usr/bin:/bin PWD=/home/u pattern=abc",
        "the key to success is practice",
        "a task-abcdefghijklmnopqrstuvwxyz name",
        "API_KEY=[REDACTED_ANTHROPIC_KEY]",
        "plain text with ünïcödé and no secrets",
    ];
    for text in kept {
        assert_eq!(redact(text), text, "changed: {text}");
    }
    assert!(matches!(redact_cow("shell: ok\n"), Cow::Borrowed(_)));
}

#[test]
fn secret_names() {
    for name in [
        "API_KEY",
        "FOO_API_KEY",
        "ANTHROPIC_API_KEY",
        "apiKey",
        "APIKey",
        "x-api-key",
        "GITHUB_TOKEN",
        "HF_TOKEN",
        "ANTHROPIC_AUTH_TOKEN",
        "authToken",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "clientSecret",
        "DB_PASSWORD",
        "MYSQL_PWD",
        "PGPASSWORD",
        "db_passwd",
        "NPM_CONFIG__AUTH",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "Authorization",
        "COOKIE",
        "SENTRY_DSN",
        "private_key",
        "secretKey",
    ] {
        assert!(is_secret_name(name), "{name} looks secret");
    }
    for name in [
        "PATH",
        "PWD",
        "OLDPWD",
        "HOME",
        "AUTHOR",
        "GIT_AUTHOR_NAME",
        "MONKEY",
        "KEYBOARD",
        "max_tokens",
        "input_tokens",
        "totalTokenCount",
        "TOKEN_COUNT",
        "SSH_AUTH_SOCK",
        "AUTH_TYPE",
        "API_KEY_FILE",
        "apiKeySource",
        "XAUTHORITY",
        "tokenizer",
        "pattern",
        "",
    ] {
        assert!(!is_secret_name(name), "{name} does not look secret");
    }
    assert_eq!(words("FOO_API_KEY"), ["foo", "api", "key"]);
    assert_eq!(words("apiKey"), ["api", "key"]);
    assert_eq!(words("APIKey"), ["api", "key"]);
    assert_eq!(words("x-api-key"), ["x", "api", "key"]);
}

#[test]
fn registered_environment_values_are_redacted_bare() {
    register_env([
        ("MOZART_REDACT_TEST_API_KEY", "zq9-unique-value-77"),
        ("MOZART_REDACT_TEST_PLAIN", "plain-value-12345"),
        ("MOZART_REDACT_TEST_TOKEN", "short"),
        ("MOZART_REDACT_TEST_SECRET", "true"),
        ("MOZART_REDACT_TEST_CREDENTIALS", "/home/u/creds.json"),
        (
            "MOZART_REDACT_TEST_PEM_KEY",
            "-----BEGIN X-----\nline-one-abcdef\nline-two-abcdef\n-----END X-----",
        ),
    ]);
    register_value("ANY_NAME", "http-api-key-value-99");
    check(&[
        (
            "saw zq9-unique-value-77 here",
            "saw [REDACTED_ENV:MOZART_REDACT_TEST_API_KEY] here",
        ),
        (
            "KEY=zq9-unique-value-77",
            "KEY=[REDACTED_ENV:MOZART_REDACT_TEST_API_KEY]",
        ),
        ("x-http-api-key-value-99-y", "x-[REDACTED_ENV:ANY_NAME]-y"),
        (
            "a line-two-abcdef b",
            "a [REDACTED_ENV:MOZART_REDACT_TEST_PEM_KEY] b",
        ),
    ]);
    for kept in [
        "plain-value-12345",
        "short and true",
        "/home/u/creds.json",
        "-----BEGIN X-----",
    ] {
        assert_eq!(redact(kept), kept);
    }
}

#[test]
fn a_source_location_or_port_after_a_secret_word_is_kept() {
    assert_eq!(
        redact("warning: auth.go:3: unused variable"),
        "warning: auth.go:3: unused variable"
    );
    assert_eq!(
        redact("token_server:8443 refused"),
        "token_server:8443 refused"
    );
    assert_ne!(redact("password: 123456"), "password: 123456");
    assert_ne!(redact("API_TOKEN=123456"), "API_TOKEN=123456");
}

#[test]
fn a_harmless_named_value_is_handed_back_without_a_copy() {
    // Every completed sheet's stderr log line holds `validations_passed=N`: the named-value
    // rule matches the name, decides it is no secret, and must not copy the line for that.
    let line = "INFO jobs: sheet 1 completed validations_passed=1 validations_total=1";
    assert!(matches!(
        redact_cow(line),
        Cow::Borrowed(text) if text == line
    ));
    // A secret beside it is still replaced, and the harmless value kept.
    assert_eq!(
        redact("validations_passed=1 db_password=hunter2hunter2"),
        "validations_passed=1 db_password=[REDACTED]"
    );
}

/// The lengths docs/security.md states: `sk-ant-`/`sk-proj-` from 4 characters after the
/// prefix, GitHub tokens from 20 (a shorter `ghp_…` is kept, as the doc says).
#[test]
fn the_documented_minimum_lengths_hold() {
    check(&[
        ("sk-ant-abcd", "[REDACTED_ANTHROPIC_KEY]"),
        ("sk-proj-abcd", "[REDACTED_OPENAI_KEY]"),
        ("ghp_abcdefghijklmnopqrst", "[REDACTED_GITHUB_TOKEN]"),
        ("ghr_abcdefghijklmnopqrst", "[REDACTED_GITHUB_TOKEN]"),
        ("ghp_abcdefghijklmnopqrs", "ghp_abcdefghijklmnopqrs"),
        ("hf_abcdefghijklmnopqrst", "[REDACTED_HF_TOKEN]"),
        ("glpat-abcdefghijklmnop", "[REDACTED_GITLAB_TOKEN]"),
    ]);
}
