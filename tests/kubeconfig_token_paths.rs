//! The launcher's kube-client reads a kubeconfig auth provider's token with JSONPath through
//! crates/jsonpath-rust, a subset patched in for the full engine (Cargo.toml says why): the
//! paths kubeconfigs use answer as JSONPath says, anything else is an error naming the path,
//! and a kubeconfig's gcp `token-key` still reaches the API server as the bearer token.

use jsonpath_rust::JsonPath;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn answers<'v>(document: &'v Value, path: &str) -> Vec<&'v Value> {
    document
        .query(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_paths_kubeconfigs_use_select_what_jsonpath_says() {
    let output = json!({
        "credential": {"access_token": "t0k", "token_expiry": "2026-11-26T18:00:00Z"},
        "items": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
        "dotted.key": 7,
        "naïve": 9,
        "bracket]key": 8,
    });
    let table: [(&str, Vec<Value>); 13] = [
        ("$", vec![output.clone()]),
        ("$.credential.access_token", vec![json!("t0k")]),
        (
            "$.credential.token_expiry",
            vec![json!("2026-11-26T18:00:00Z")],
        ),
        ("$['credential']['access_token']", vec![json!("t0k")]),
        ("$[\"credential\"].access_token", vec![json!("t0k")]),
        ("$['dotted.key']", vec![json!(7)]),
        ("$['bracket]key']", vec![json!(8)]),
        ("$.items[1].name", vec![json!("b")]),
        ("$.items[-1].name", vec![json!("c")]),
        ("$.items[*].name", vec![json!("a"), json!("b"), json!("c")]),
        ("$.items.*.name", vec![json!("a"), json!("b"), json!("c")]),
        ("$.missing.access_token", vec![]),
        ("$.items[0].name", vec![json!("a")]),
    ];
    for (path, expected) in table {
        let got: Vec<Value> = answers(&output, path).into_iter().cloned().collect();
        assert_eq!(got, expected, "{path}");
    }
    assert_eq!(answers(&output, "$.naïve"), vec![&json!(9)]);
    // Out of range, or a step of the wrong kind: nothing, as JSONPath says, not an error.
    assert!(answers(&output, "$.items[3]").is_empty());
    assert!(answers(&output, "$.items.name").is_empty());
    assert!(answers(&output, "$.credential[0]").is_empty());
}

#[test]
fn a_path_outside_the_subset_is_an_error_naming_it() {
    let output = json!({"credential": {"access_token": "t0k"}});
    for path in [
        "credential.access_token",
        "$..access_token",
        "$.credential.",
        "$.credential[?(@.x)]",
        "$.credential[0:2]",
        "$['credential'",
        "$.credential access_token",
        "$.items[01]",
        "$.items[+1]",
        "$.items[-0]",
        "$.items[1.0]",
        "$.items[]",
    ] {
        let error = output.query(path).expect_err(path).to_string();
        assert!(error.contains(&format!("{path:?}")), "{path}: {error}");
    }
}

/// A kubeconfig whose gcp auth provider prints its token as JSON (as `gcloud config
/// config-helper` does): kube-client runs it, reads `token-key` with JSONPath and sends the token.
#[tokio::test]
async fn a_kubeconfig_token_key_reaches_the_api_server_as_the_bearer_token() {
    let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = server.local_addr().unwrap();
    let credential = r#"{"credential":{"access_token":"from-the-helper","token_expiry":"2099-01-01T00:00:00Z"}}"#;
    let kubeconfig = format!(
        r#"
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: http://{address}
contexts:
- name: test
  context: {{cluster: test, user: helper}}
current-context: test
users:
- name: helper
  user:
    auth-provider:
      name: gcp
      config:
        cmd-path: echo
        cmd-args: '{credential}'
        token-key: '{{.credential.access_token}}'
        expiry-key: '{{.credential.token_expiry}}'
"#
    );
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();

    let answer = tokio::spawn(async move {
        let (mut stream, _) = server.accept().await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        let body =
            r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#;
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(response.as_bytes()).await.unwrap();
        String::from_utf8(head).unwrap()
    });
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, "default");
    pods.list(&Default::default()).await.unwrap();
    let head = answer.await.unwrap().to_ascii_lowercase();
    assert!(
        head.contains("authorization: bearer from-the-helper\r\n"),
        "{head}"
    );
}

/// The subset is what the launcher builds with: Cargo.lock has jsonpath-rust from this
/// repository (no registry source), and no regex engine came back with it. A kube upgrade that
/// asks for a jsonpath-rust the patch does not satisfy would quietly bring the full engine back.
#[test]
fn the_lock_file_takes_the_subset_and_no_regex_engine() {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap();
    let packages: Vec<&str> = lock.split("[[package]]").collect();
    let named = |name: &str| {
        packages
            .iter()
            .filter(move |p| p.contains(&format!("\nname = \"{name}\"\n")))
            .copied()
            .collect::<Vec<&str>>()
    };
    let jsonpath = named("jsonpath-rust");
    assert_eq!(jsonpath.len(), 1, "{jsonpath:?}");
    assert!(!jsonpath[0].contains("source ="), "{}", jsonpath[0]);
    for engine in ["regex", "regex-automata", "pest"] {
        assert!(named(engine).is_empty(), "{engine} is back in Cargo.lock");
    }
}
