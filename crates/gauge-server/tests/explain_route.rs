//! `POST /explain` and the playground page, against a live server with the default model.

mod common;

use common::{assert_error, get, post, request, shared, test_config};
use gauge_server::{RunningServer, ServerConfig};
use serde_json::{json, Value};

fn body(extra: Value) -> Value {
    let mut b = json!({
        "prompt": "The cat sat on the mat. The cat sat on the",
        "n_predict": 4,
        "seed": 11,
        "repeat_penalty": 1.3,
        "explain": {"top": 5, "shifts": [-8, 0, 8]},
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn p_of(view: &Value) -> Vec<(i64, f64)> {
    view["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["id"].as_i64().unwrap(), t["p"].as_f64().unwrap()))
        .collect()
}

fn max_dp(a: &Value, b: &Value) -> f64 {
    let (a, b) = (p_of(a), p_of(b));
    let get = |v: &[(i64, f64)], id| v.iter().find(|e| e.0 == id).map_or(0.0, |e| e.1);
    a.iter()
        .chain(&b)
        .map(|&(id, _)| (get(&a, id) - get(&b, id)).abs())
        .fold(0.0, f64::max)
}

#[test]
fn explain_records_every_stage_and_samples_what_completion_samples() {
    let addr = shared();
    let r = post(addr, "/explain", &body(json!({})));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let chain = v["chain"].as_str().unwrap();
    let names: Vec<&str> = chain.trim().split(" -> ").skip(1).collect();
    let steps = v["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    for s in steps {
        let stages: Vec<&str> = s["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|st| st["name"].as_str().unwrap())
            .collect();
        assert_eq!(stages, names, "one record per stage, in chain order");
        let pen = &s["stages"][0];
        assert_eq!(pen["name"], "penalties");
        assert_eq!(pen["shift_invariant"], false);
        assert!(pen["candidates"].as_array().unwrap().len() <= 5);
        assert_eq!(s["selected"]["id"], s["id"]);
        // normalized stands still under every shift; ctrl is checked below over all steps
        let shifts = s["shifts"].as_array().unwrap();
        assert_eq!(shifts.len(), 3);
        let zero = &shifts[1];
        // the companion in the request's mode (ctrl) is the request's chain at c = 0
        assert_eq!(
            zero["ctrl"]["selected"], s["id"],
            "the ctrl companion drifted"
        );
        for sh in shifts {
            let d = max_dp(&sh["normalized"], &zero["normalized"]);
            assert!(d < 1e-4, "normalized moved by {d} at c = {}", sh["c"]);
        }
    }
    let ctrl_moves = steps.iter().any(|s| {
        let sh = s["shifts"].as_array().unwrap();
        max_dp(&sh[0]["ctrl"], &sh[1]["ctrl"]) > 1e-3
            || max_dp(&sh[2]["ctrl"], &sh[1]["ctrl"]) > 1e-3
    });
    assert!(
        ctrl_moves,
        "ctrl should move under a shift of ±8 on this repetitive prompt"
    );

    // Explaining is a separate entry point: it samples exactly the tokens /completion samples.
    let mut plain = body(json!({"return_tokens": true}));
    plain.as_object_mut().unwrap().remove("explain");
    let c = post(addr, "/completion", &plain).json();
    let ids: Vec<&Value> = steps.iter().map(|s| &s["id"]).collect();
    let want: Vec<&Value> = c["tokens"].as_array().unwrap().iter().collect();
    assert_eq!(ids, want, "/explain and /completion disagree");
}

#[test]
fn explain_streams_head_steps_and_done() {
    let addr = shared();
    let r = post(
        addr,
        "/explain",
        &body(json!({"stream": true, "n_predict": 3})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let events: Vec<Value> = r
        .sse_data()
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(events[0]["head"]["chain"].is_string(), "{}", events[0]);
    let last = events.last().unwrap();
    assert_eq!(last["done"], true, "{last}");
    let steps: Vec<&Value> = events.iter().filter(|e| e.get("step").is_some()).collect();
    assert_eq!(
        steps.len() as u64,
        last["tokens_predicted"].as_u64().unwrap()
    );
    for (k, s) in steps.iter().enumerate() {
        assert_eq!(s["index"], k);
        assert!(s["step"]["stages"].is_array());
    }
}

#[test]
fn bad_explain_fields_name_the_field() {
    let addr = shared();
    for (extra, param) in [
        (json!({"explain": {"top": 0}}), "explain.top"),
        (json!({"explain": {"shifts": [1, "x"]}}), "explain.shifts"),
        (json!({"explain": {"shifts": [1e9]}}), "explain.shifts"),
        (json!({"explain": 3}), "explain"),
        (json!({"n_predict": 100000}), "n_predict"),
        (
            json!({"repeat_penalty_mode": "sideways"}),
            "repeat_penalty_mode",
        ),
        (
            json!({"response_format": {"type": "json_object"}}),
            "response_format",
        ),
    ] {
        let r = post(addr, "/explain", &body(extra.clone()));
        assert_error(&r, 400, Some(param));
    }
}

#[test]
fn the_page_is_public_and_explain_needs_the_key() {
    let srv = RunningServer::start(ServerConfig {
        api_key: Some("sekret".into()),
        ..test_config()
    })
    .expect("server starts");
    let addr = srv.addr();
    let page = get(addr, "/");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(page.body.contains("/playground/app.js"));
    for (path, mime) in [
        ("/playground/app.js", "text/javascript"),
        ("/playground/style.css", "text/css"),
        ("/playground/presets.json", "application/json"),
    ] {
        let r = get(addr, path);
        assert_eq!(r.status, 200, "{path}");
        assert!(
            r.header("content-type").unwrap().starts_with(mime),
            "{path}"
        );
    }
    let presets = get(addr, "/playground/presets.json").json();
    for name in ["json", "code", "chat", "creative"] {
        assert!(
            presets[name]["temperature"].is_number(),
            "{name}: {presets}"
        );
    }
    assert_eq!(get(addr, "/playground/nope.js").status, 404);
    let b = body(json!({"n_predict": 1})).to_string();
    let r = request(addr, "POST", "/explain", &[], b.as_bytes());
    assert_eq!(
        assert_error(&r, 401, None)["error"]["code"],
        "invalid_api_key"
    );
    let r = request(
        addr,
        "POST",
        "/explain",
        &[("Authorization", "Bearer sekret")],
        b.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    srv.shutdown().unwrap();
}
