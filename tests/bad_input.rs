//! Bad input never panics and always gets a clear, one-line error naming what is wrong.
//! docs/development.md (Tests) summarises what these generate.

use clap::CommandFactory;
use k8s_openapi::api::core::v1::Pod;
use paddle_launcher::cli::{Cli, JobArgs};
use paddle_launcher::{pod_view, rank, readiness, Config, LabelSelector, PodView, Readiness};
use proptest::prelude::*;
use serde_json::Value;

/// Values a user might put in a variable: valid ones, near misses, garbage, huge, unicode.
fn value() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some(String::new())),
        Just(Some("3".into())),
        Just(Some("7164".into())),
        Just(Some("65536".into())),
        Just(Some("-1".into())),
        Just(Some("0x10".into())),
        Just(Some("1e3".into())),
        Just(Some("99999999999999999999999".into())),
        Just(Some("127.0.0.2".into())),
        Just(Some("fe80::1%eth0".into())),
        Just(Some("job-name=x".into())),
        Just(Some("a in (b,c)".into())),
        Just(Some("v1".into())),
        Just(Some("collective".into())),
        Just(Some("trainer".into())),
        Just(Some("/tmp/data/[ab".into())),
        "[ -~]{0,40}".prop_map(Some),
        "\\PC{0,20}".prop_map(Some),
        Just(Some("x".repeat(100_000))),
    ]
}

/// Every option `run` has, by its environment variable: taken from the CLI definition, so an
/// option added later is covered without touching this test.
fn option_env_names() -> Vec<String> {
    let cli = Cli::command();
    let run = cli.find_subcommand("run").unwrap();
    run.get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().to_string())
        .collect()
}

prop_compose! {
    fn job_args()(
        fields in proptest::collection::vec(value(), option_env_names().len()),
        trainer_args in proptest::collection::vec("[ -~]{0,12}", 0..4),
    ) -> JobArgs {
        let names = option_env_names();
        let pairs: Vec<(&str, &str)> = names
            .iter()
            .zip(&fields)
            .filter_map(|(name, value)| Some((name.as_str(), value.as_deref()?)))
            .collect();
        JobArgs::from_env_pairs(pairs, &trainer_args).unwrap()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_configuration_is_accepted_or_named_in_one_line(args in job_args()) {
        if let Err(e) = Config::from_args(&args) {
            let line = e.to_string();
            prop_assert!(line.starts_with("invalid "), "{line}");
            prop_assert!(line.contains(" (--"), "no flag named: {line}");
            prop_assert!(!e.expected.is_empty());
            prop_assert!(!line.contains('\n') || e.value.contains('\n'), "{line}");
        }
    }

    #[test]
    fn any_selector_text_parses_or_is_refused_and_round_trips(text in "[a-z=!(), .\\-/_0-9A-Z]{0,40}") {
        if let Ok(selector) = LabelSelector::parse(&text) {
            let again = LabelSelector::parse(&selector.to_string());
            prop_assert_eq!(again, Ok(selector));
        }
    }

    #[test]
    fn mangled_pod_json_never_panics(seed in any::<u64>(), edits in 1usize..12) {
        let mut pod = recorded_pods()[seed as usize % recorded_pods().len()].clone();
        let mut state = seed | 1;
        for _ in 0..edits {
            mangle(&mut pod, &mut state);
        }
        if let Ok(pod) = serde_json::from_value::<Pod>(pod) {
            let view = pod_view(&pod);
            let _ = readiness(std::slice::from_ref(&view), 1);
            let _ = rank(&[view]);
        }
    }
}

fn recorded_pods() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/k8s-api-replays/v1-36-pod-list.json"
    );
    let recorded: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let list: Value = serde_json::from_str(recorded[0]["response_body"].as_str().unwrap()).unwrap();
    list["items"].as_array().unwrap().clone()
}

/// Removes a field, or gives it a value of the wrong type, somewhere in the object.
fn mangle(value: &mut Value, state: &mut u64) {
    let mut roll = || {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    };
    let mut node = value;
    loop {
        let keys: Vec<String> = match node.as_object() {
            Some(map) if !map.is_empty() => map.keys().cloned().collect(),
            _ => break,
        };
        let key = keys[roll() as usize % keys.len()].clone();
        let descend = roll() % 3 != 0 && node[&key].is_object();
        if !descend {
            let replacement = match roll() % 6 {
                0 => Value::Null,
                1 => Value::Bool(true),
                2 => Value::from(-1),
                3 => Value::from("x".repeat(10_000)),
                4 => Value::Array(vec![Value::from(1)]),
                _ => {
                    node.as_object_mut().unwrap().remove(&key);
                    return;
                }
            };
            node[&key] = replacement;
            return;
        }
        node = &mut node[&key];
    }
}

#[test]
fn odd_ips_are_parsed_or_treated_as_missing() {
    let cases = [
        ("10.0.0.1", Some("10.0.0.1")),
        ("::ffff:10.0.0.1", Some("::ffff:10.0.0.1")),
        ("fd00::1", Some("fd00::1")),
        ("fe80::1%eth0", None),
        ("999.1.1.1", None),
        (" 10.0.0.1", None),
        ("", None),
        ("10.0.0.1/24", None),
    ];
    for (ip, expected) in cases {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "status": {"phase": "Running", "podIP": ip}
        }))
        .unwrap();
        let view = pod_view(&pod);
        assert_eq!(
            view.ip.map(|i| i.to_string()).as_deref(),
            expected,
            "{ip:?}"
        );
        // A Running pod without a usable IP is not ready, and says so.
        if expected.is_none() {
            assert!(
                matches!(readiness(&[view], 1), Readiness::Waiting(_)),
                "{ip:?}"
            );
        }
    }
}

#[test]
fn a_hundred_thousand_pods_are_judged_and_ranked() {
    let pods: Vec<PodView> = (0..100_000u32)
        .map(|i| PodView {
            name: format!("p-{i}"),
            ip: Some(std::net::IpAddr::from([
                10,
                (i >> 16) as u8,
                (i >> 8) as u8,
                i as u8,
            ])),
            phase: "Running".into(),
            terminating: false,
            index: None,
            attempt: None,
            created: None,
            waiting_reason: None,
            gates: Vec::new(),
            ended: None,
            grace_period: None,
            stops_by: None,
            deletion_grace: None,
            not_ready: false,
            left_out: false,
            node: None,
        })
        .collect();
    let Readiness::Ready(ready) = readiness(&pods, 100_000) else {
        panic!("not ready")
    };
    let members = rank(&ready);
    assert_eq!(members.len(), 100_000);
    assert_eq!(members[256].ip.to_string(), "10.0.1.0");
    let Readiness::Waiting(w) = readiness(&pods, 99_999) else {
        panic!("one pod too many accepted")
    };
    assert_eq!(w.live, 100_000);
}
