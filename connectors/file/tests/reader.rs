//! The file reader on real files: CSV quirks (byte-order mark, RFC 4180
//! quoting, header-only exports) and JSON Lines (dotted paths, numeric
//! keys, blank lines, JSON numbers as major units).

use std::fs;
use std::path::PathBuf;

use recon_core::{Currency, Field, FieldKind, Money, Record, Schema, Value};
use recon_file::{read_all, AmountFormat, FileReader, FileSpec, ReadError};

/// A fresh, empty folder for one test under Cargo's per-target temp dir.
fn test_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("recon-file-reader")
        .join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &std::path::Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, bytes).unwrap();
    p
}

fn field(name: &str, kind: FieldKind) -> Field {
    Field {
        name: name.into(),
        kind,
        compared: true,
    }
}

fn money(minor: i64, code: &str) -> Value {
    Value::Money(Money::from_minor(minor, Currency::parse(code).unwrap()))
}

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

/// Amount and a text column, read with the `currency` column.
fn amount_and(column: &str) -> Schema {
    Schema {
        fields: vec![
            field("amount", FieldKind::Money),
            field(column, FieldKind::Text),
        ],
    }
}

fn spec(path: PathBuf, key: &str, columns: &[&str], format: AmountFormat) -> FileSpec {
    FileSpec {
        path,
        key_column: key.into(),
        columns: columns.iter().map(|c| c.to_string()).collect(),
        currency_column: Some("currency".into()),
        amount_format: format,
        max_record_bytes: recon_file::DEFAULT_MAX_RECORD_BYTES,
    }
}

/// Every record with the location the reader gave it.
fn read_with_locations(spec: FileSpec, schema: &Schema) -> Vec<(Record, String)> {
    let mut reader = FileReader::open(spec, schema).unwrap();
    let mut out = Vec::new();
    reader
        .for_each(|key, values, location| {
            out.push((
                Record {
                    key: key.to_string(),
                    values: values.iter().map(|v| v.to_owned_value()).collect(),
                },
                location().0,
            ));
            Ok::<(), std::convert::Infallible>(())
        })
        .map_err(|e| match e {
            ReadError::Connector(c) => c,
            ReadError::Caller(never) => match never {},
        })
        .unwrap();
    out
}

fn record(key: &str, values: Vec<Value>) -> Record {
    Record {
        key: key.into(),
        values,
    }
}

// ------------------------------------------------------------------- CSV

/// The currency column read as a compared field too: each row's amount
/// and currency follow that row's own code (looked up once per row and
/// shared by both cells), through more codes than the reader's cache
/// keeps, in any case and in an order no cycle repeats; a code unknown
/// on a later row is refused naming its line and the currency column.
#[test]
fn csv_amount_and_currency_field_follow_each_rows_own_code() {
    let dir = test_dir("csv_row_currency");
    let codes = [
        "usd", "EUR", "jpy", "Gbp", "chf", "cad", "aud", "nzd", "sek", "nok", "dkk", "pln", "czk",
        "huf", "mxn", "brl", "inr", "sgd", "hkd", "krw", "kwd", "bhd",
    ];
    let mut text_rows = String::from("id,amount,currency\n");
    let mut want = Vec::new();
    for i in 0..400u64 {
        let code = codes[(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59) as usize % codes.len()];
        let amount = i * 7 + 1;
        text_rows.push_str(&format!("r{i},{amount},{code}\n"));
        let currency = Currency::parse(code).unwrap();
        want.push(record(
            &format!("r{i}"),
            vec![
                Value::Money(Money::from_minor(amount as i64, currency)),
                Value::Currency(currency),
            ],
        ));
    }
    let schema = Schema {
        fields: vec![
            field("amount", FieldKind::Money),
            field("currency", FieldKind::Currency),
        ],
    };
    let path = write(&dir, "rows.csv", text_rows.as_bytes());
    let got: Vec<Record> = read_with_locations(
        spec(path, "id", &["amount", "currency"], AmountFormat::Minor),
        &schema,
    )
    .into_iter()
    .map(|(r, _)| r)
    .collect();
    assert_eq!(got, want);

    text_rows.push_str("r400,5,usd\nr401,6,xyz\n");
    let path = write(&dir, "unknown.csv", text_rows.as_bytes());
    let err = read_all(
        spec(path, "id", &["amount", "currency"], AmountFormat::Minor),
        &schema,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("line 403"), "{err}");
    assert!(err.contains("column `currency`"), "{err}");
    assert!(err.contains("unknown currency code `xyz`"), "{err}");
}

/// Timestamps and amounts in the forms the reader reads inline: RFC 3339
/// cells of a few dates met again and again (the reader keeps the dates
/// it read), Unix seconds of ten digits and of other lengths, amounts of
/// one to nine digits, each read as jiff and `str::parse` read them; then
/// a date that shares a kept date's place (the 33rd of a month whose 1st
/// was read, a 29 February after one of a leap year) is refused, naming
/// its line and column.
#[test]
fn csv_timestamps_and_amounts_read_inline_as_the_general_parsers_do() {
    let dir = test_dir("csv_inline_forms");
    let dates = [
        "2026-11-01",
        "2026-11-30",
        "2026-12-01",
        "2024-02-29",
        "2025-11-01",
    ];
    let mut rows = String::from("id,amount,currency,created\n");
    let mut want = Vec::new();
    for i in 0..500i64 {
        let amount = (i * 7919) % 10i64.pow((i % 9 + 1) as u32);
        let created = if i % 3 == 0 {
            // 1 to 11 digits: ten is a Unix time's own path.
            (i * 104_729 % 10i64.pow((i % 11 + 1) as u32)).to_string()
        } else {
            let offset = ["Z", "+05:30", "-08:00", "z"][(i % 4) as usize];
            format!(
                "{}T{:02}:{:02}:{:02}{offset}",
                dates[(i % 5) as usize],
                i % 24,
                i % 60,
                (i * 7) % 60
            )
        };
        rows.push_str(&format!("r{i},{amount},usd,{created}\n"));
        let at = match created.parse::<i64>() {
            Ok(s) => jiff::Timestamp::from_second(s).unwrap(),
            Err(_) => created.parse::<jiff::Timestamp>().unwrap(),
        };
        want.push(record(
            &format!("r{i}"),
            vec![money(amount, "usd"), Value::Timestamp(at)],
        ));
    }
    let schema = Schema {
        fields: vec![
            field("amount", FieldKind::Money),
            field("created", FieldKind::Timestamp),
        ],
    };
    let columns = ["amount", "created"];
    let path = write(&dir, "rows.csv", rows.as_bytes());
    let got: Vec<Record> =
        read_with_locations(spec(path, "id", &columns, AmountFormat::Minor), &schema)
            .into_iter()
            .map(|(r, _)| r)
            .collect();
    assert_eq!(got, want);

    // Each after the date whose place it takes.
    for (before, bad) in [
        ("2026-11-01T00:00:00Z", "2026-11-33T00:00:00Z"),
        ("2024-02-29T00:00:00Z", "2025-02-29T00:00:00Z"),
    ] {
        let mut rows = rows.clone();
        rows.push_str(&format!("r500,5,usd,{before}\nr501,5,usd,{bad}\n"));
        let path = write(&dir, "bad.csv", rows.as_bytes());
        let err = read_all(spec(path, "id", &columns, AmountFormat::Minor), &schema)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 503"), "{bad}: {err}");
        assert!(err.contains("column `created`"), "{bad}: {err}");
        assert!(err.contains(bad), "{bad}: {err}");
    }
}

#[test]
fn csv_header_with_a_utf8_byte_order_mark() {
    let dir = test_dir("bom");
    // Excel's "CSV UTF-8": a BOM right before the first (key) column.
    let path = write(
        &dir,
        "excel.csv",
        b"\xEF\xBB\xBFid,amount,currency,status\r\nch_1,2999,usd,succeeded\r\nch_2,500,JPY,pending\r\n",
    );
    let records = read_all(
        spec(path, "id", &["amount", "status"], AmountFormat::Minor),
        &amount_and("status"),
    )
    .unwrap();
    assert_eq!(
        records,
        vec![
            record("ch_1", vec![money(2999, "USD"), text("succeeded")]),
            record("ch_2", vec![money(500, "JPY"), text("pending")]),
        ]
    );
}

#[test]
fn csv_keys_lose_surrounding_whitespace_of_any_kind_and_nothing_else() {
    let dir = test_dir("key-trim");
    // ASCII spaces and tabs, a no-break space (U+00A0) and an ideographic
    // space (U+3000) around keys, one-character keys, a key whose ends
    // are non-ASCII but not spaces, and a key ending in DEL (0x7F, not
    // whitespace): only the whitespace goes.
    let path = write(
        &dir,
        "keys.csv",
        "id,amount,currency\n ch_1 ,1,usd\n\tch_2,2,usd\nch_3\t,3,usd\n\u{a0}ch_4\u{3000},4,usd\nx,5,usd\n y,6,usd\n\u{e9}t\u{e9},7,usd\nch_8\u{7f},8,usd\n\"  ch 9  \",9,usd\n"
            .as_bytes(),
    );
    let schema = Schema {
        fields: vec![field("amount", FieldKind::Money)],
    };
    let keys: Vec<String> = read_all(spec(path, "id", &["amount"], AmountFormat::Minor), &schema)
        .unwrap()
        .into_iter()
        .map(|r| r.key)
        .collect();
    assert_eq!(
        keys,
        [
            "ch_1",
            "ch_2",
            "ch_3",
            "ch_4",
            "x",
            "y",
            "\u{e9}t\u{e9}",
            "ch_8\u{7f}",
            "ch 9"
        ]
    );
}

#[test]
fn csv_byte_order_mark_before_a_quoted_header() {
    let dir = test_dir("bom_quoted");
    // Windows PowerShell's `Export-Csv -Encoding UTF8` quotes every field
    // and starts the file with a BOM: the BOM comes before the first quote.
    let path = write(
        &dir,
        "powershell.csv",
        b"\xEF\xBB\xBF\"id\",\"amount\",\"currency\",\"status\"\r\n\"ch_1\",\"2999\",\"usd\",\"succeeded\"\r\n",
    );
    let records = read_all(
        spec(path, "id", &["amount", "status"], AmountFormat::Minor),
        &amount_and("status"),
    )
    .unwrap();
    assert_eq!(
        records,
        vec![record("ch_1", vec![money(2999, "USD"), text("succeeded")])]
    );
}

#[test]
fn csv_quoted_fields_with_commas_newlines_and_quotes() {
    let dir = test_dir("quoted");
    let path = write(
        &dir,
        "quoted.csv",
        concat!(
            "id,amount,currency,note\n",
            "\"ch_1\",\"2999\",usd,\"paid, late\"\n",
            "ch_2,500,jpy,\"line one\nline two\"\n",
            "ch_3,1234,kwd,\"say \"\"hi\"\", then \"\"bye\"\"\"\n",
            "\"ch,4\",-150,eur,\"\"\"quoted\"\" at both ends, and\r\na CRLF\"\n",
            "ch_5,1,usd,plain\n",
        )
        .as_bytes(),
    );
    let got = read_with_locations(
        spec(path.clone(), "id", &["amount", "note"], AmountFormat::Minor),
        &amount_and("note"),
    );
    let shown = path.display().to_string();
    let want = vec![
        (
            record("ch_1", vec![money(2999, "USD"), text("paid, late")]),
            format!("{shown} line 2"),
        ),
        (
            record("ch_2", vec![money(500, "JPY"), text("line one\nline two")]),
            format!("{shown} line 3"),
        ),
        (
            record(
                "ch_3",
                vec![money(1234, "KWD"), text("say \"hi\", then \"bye\"")],
            ),
            // The row above spans two lines.
            format!("{shown} line 5"),
        ),
        (
            record(
                "ch,4",
                vec![
                    money(-150, "EUR"),
                    text("\"quoted\" at both ends, and\r\na CRLF"),
                ],
            ),
            format!("{shown} line 6"),
        ),
        (
            record("ch_5", vec![money(1, "USD"), text("plain")]),
            format!("{shown} line 8"),
        ),
    ];
    assert_eq!(got, want);
}

/// Text is read without conversion, but an empty text cell (bare or
/// quoted) is still null, as in every other kind, and a space is text.
#[test]
fn csv_empty_text_cells_are_null_and_others_are_text() {
    let dir = test_dir("empty-text");
    let path = write(
        &dir,
        "empty.csv",
        b"id,amount,currency,note
ch_1,5,usd,
ch_2,6,usd,\"\"
ch_3,7,usd, 
ch_4,8,usd,x
",
    );
    let got: Vec<Record> = read_with_locations(
        spec(path, "id", &["amount", "note"], AmountFormat::Minor),
        &amount_and("note"),
    )
    .into_iter()
    .map(|(r, _)| r)
    .collect();
    assert_eq!(
        got,
        vec![
            record("ch_1", vec![money(5, "USD"), Value::Null]),
            record("ch_2", vec![money(6, "USD"), Value::Null]),
            record("ch_3", vec![money(7, "USD"), text(" ")]),
            record("ch_4", vec![money(8, "USD"), text("x")]),
        ]
    );
}

#[test]
fn csv_quote_never_closed_is_an_error_naming_its_line() {
    let dir = test_dir("unterminated");
    // Read leniently, the rest of the file would silently become one field
    // and ch_3 would vanish from the diff.
    let path = write(
        &dir,
        "open_quote.csv",
        b"id,amount,currency,status\nch_1,1,usd,ok\nch_2,1,usd,\"open\nch_3,1,usd,ok\n",
    );
    let err = read_all(
        spec(
            path.clone(),
            "id",
            &["amount", "status"],
            AmountFormat::Minor,
        ),
        &amount_and("status"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains(&format!("{} line 3", path.display())), "{err}");
}

#[test]
fn csv_with_only_a_header_has_zero_records() {
    let dir = test_dir("header_only");
    let schema = amount_and("status");
    for (name, bytes) in [
        ("lf.csv", &b"id,amount,currency,status\n"[..]),
        ("no_newline.csv", &b"id,amount,currency,status"[..]),
        (
            "crlf_bom.csv",
            &b"\xEF\xBB\xBFid,amount,currency,status\r\n"[..],
        ),
    ] {
        let path = write(&dir, name, bytes);
        let records = read_all(
            spec(path, "id", &["amount", "status"], AmountFormat::Minor),
            &schema,
        )
        .unwrap();
        assert!(records.is_empty(), "{name}: {records:?}");
    }
}

// ----------------------------------------------------------- JSON Lines

#[test]
fn jsonl_nested_dotted_path_and_numeric_key() {
    let dir = test_dir("dotted");
    let path = write(
        &dir,
        "charges.jsonl",
        concat!(
            "{\"id\":1001,\"amount_details\":{\"total\":2999,\"tax\":0},\"currency\":\"usd\",\"status\":\"succeeded\"}\n",
            "{\"id\":\"ch_2\",\"amount_details\":{\"total\":\"500\"},\"currency\":\"JPY\",\"status\":\"pending\"}\n",
            "{\"id\":1003,\"amount_details\":{\"total\":-1234},\"currency\":\"kwd\",\"status\":null}\n",
        )
        .as_bytes(),
    );
    let records = read_all(
        spec(
            path,
            "id",
            &["amount_details.total", "status"],
            AmountFormat::Minor,
        ),
        &amount_and("status"),
    )
    .unwrap();
    assert_eq!(
        records,
        vec![
            record("1001", vec![money(2999, "USD"), text("succeeded")]),
            record("ch_2", vec![money(500, "JPY"), text("pending")]),
            record("1003", vec![money(-1234, "KWD"), Value::Null]),
        ]
    );
}

#[test]
fn jsonl_blank_lines_are_skipped_but_still_counted() {
    let dir = test_dir("blank_lines");
    let path = write(
        &dir,
        "charges.jsonl",
        concat!(
            "\n",
            "{\"id\":\"a\",\"amount\":100,\"currency\":\"usd\",\"status\":\"succeeded\"}\n",
            "\n",
            "   \t \r\n",
            "{\"id\":\"b\",\"amount\":200,\"currency\":\"usd\",\"status\":\"succeeded\"}\r\n",
            "\n",
            "\n",
        )
        .as_bytes(),
    );
    let shown = path.display().to_string();
    let got = read_with_locations(
        spec(
            path.clone(),
            "id",
            &["amount", "status"],
            AmountFormat::Minor,
        ),
        &amount_and("status"),
    );
    assert_eq!(
        got,
        vec![
            (
                record("a", vec![money(100, "USD"), text("succeeded")]),
                format!("{shown} line 2"),
            ),
            (
                record("b", vec![money(200, "USD"), text("succeeded")]),
                format!("{shown} line 5"),
            ),
        ]
    );

    // An error after blank lines names the line as an editor shows it.
    let bad = write(
        &dir,
        "bad.jsonl",
        b"{\"id\":\"a\",\"amount\":100,\"currency\":\"usd\",\"status\":\"x\"}\n\n\n{\"id\":\"b\",\n",
    );
    let err = read_all(
        spec(
            bad.clone(),
            "id",
            &["amount", "status"],
            AmountFormat::Minor,
        ),
        &amount_and("status"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains(&format!("{} line 4", bad.display())), "{err}");
}

#[test]
fn jsonl_number_in_major_units_is_converted_exactly() {
    let dir = test_dir("major_numbers");
    let path = write(
        &dir,
        "orders.jsonl",
        concat!(
            "{\"id\":\"usd\",\"amount\":29.99,\"currency\":\"USD\",\"status\":\"paid\"}\n",
            // 1.15 is 1.149999... as a float; it must still be 115 cents.
            "{\"id\":\"float_trap\",\"amount\":1.15,\"currency\":\"USD\",\"status\":\"paid\"}\n",
            "{\"id\":\"jpy\",\"amount\":500,\"currency\":\"JPY\",\"status\":\"paid\"}\n",
            "{\"id\":\"kwd\",\"amount\":1.234,\"currency\":\"KWD\",\"status\":\"paid\"}\n",
            "{\"id\":\"refund\",\"amount\":-12.5,\"currency\":\"EUR\",\"status\":\"refunded\"}\n",
        )
        .as_bytes(),
    );
    let records = read_all(
        spec(path, "id", &["amount", "status"], AmountFormat::Major),
        &amount_and("status"),
    )
    .unwrap();
    let amounts: Vec<(&str, &Value)> = records
        .iter()
        .map(|r| (r.key.as_str(), &r.values[0]))
        .collect();
    assert_eq!(
        amounts,
        vec![
            ("usd", &money(2999, "USD")),
            ("float_trap", &money(115, "USD")),
            ("jpy", &money(500, "JPY")),
            ("kwd", &money(1234, "KWD")),
            ("refund", &money(-1250, "EUR")),
        ]
    );
}

#[test]
fn jsonl_byte_order_mark_and_unknown_currency_name_the_right_column() {
    let path = test_dir("jsonl_bom").join("bom.jsonl");
    std::fs::write(
        &path,
        "\u{feff}{\"id\":\"ch_1\",\"amount\":2999,\"currency\":\"usd\",\"status\":\"ok\"}\n{\"id\":\"ch_2\",\"amount\":5,\"currency\":\"xyz\",\"status\":\"ok\"}\n",
    )
    .unwrap();
    let schema = recon_core::Schema {
        fields: vec![recon_core::Field {
            name: "amount".into(),
            kind: recon_core::FieldKind::Money,
            compared: true,
        }],
    };
    let spec = recon_file::FileSpec {
        path: path.clone(),
        key_column: "id".into(),
        columns: vec!["amount".into()],
        currency_column: Some("currency".into()),
        amount_format: recon_file::AmountFormat::Minor,
        max_record_bytes: recon_file::DEFAULT_MAX_RECORD_BYTES,
    };
    let err = recon_file::read_all(spec, &schema).unwrap_err().to_string();
    assert!(err.contains("line 2"), "{err}");
    assert!(err.contains("column `currency`"), "{err}");
    assert!(err.contains("unknown currency code `xyz`"), "{err}");
}

/// Issue 11, exact JSON: every number is read from its text. Each row is
/// (line's JSON amount, currency, expected minor units).
#[test]
fn jsonl_numbers_are_read_from_their_text_never_through_a_float() {
    let dir = test_dir("exact_numbers");
    let cases: &[(&str, &str, i64)] = &[
        // Both were rounded by f64 to ...456.80 and ...409.92.
        ("1234567890123456.7", "EUR", 123456789012345670),
        ("90071992547409.93", "USD", 9007199254740993),
        ("0.1", "USD", 10),
        ("1.000", "KWD", 1000),
        ("500.00", "JPY", 500),
    ];
    let mut body = String::new();
    for (i, (amount, cur, _)) in cases.iter().enumerate() {
        body.push_str(&format!(
            "{{\"id\":\"r{i}\",\"amount\":{amount},\"currency\":\"{cur}\",\"status\":\"ok\"}}\n"
        ));
    }
    let path = write(&dir, "exact.jsonl", body.as_bytes());
    let records = read_all(
        spec(path, "id", &["amount", "status"], AmountFormat::Major),
        &amount_and("status"),
    )
    .unwrap();
    assert_eq!(records.len(), cases.len());
    for (r, (amount, cur, minor)) in records.iter().zip(cases) {
        assert_eq!(r.values[0], money(*minor, cur), "{amount} {cur}");
    }
}

#[test]
fn jsonl_amount_with_a_float_tail_is_an_error_naming_file_line_and_field() {
    let dir = test_dir("float_tail");
    let path = write(
        &dir,
        "tail.jsonl",
        b"{\"id\":\"a\",\"amount\":29.99,\"currency\":\"USD\",\"status\":\"ok\"}\n{\"id\":\"b\",\"amount\":29.990000000000002,\"currency\":\"USD\",\"status\":\"ok\"}\n",
    );
    let err = read_all(
        spec(
            path.clone(),
            "id",
            &["amount", "status"],
            AmountFormat::Major,
        ),
        &amount_and("status"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains(&format!("{} line 2", path.display())), "{err}");
    assert!(err.contains("column `amount`"), "{err}");
    assert!(
        err.contains("`29.990000000000002` has more decimal places than USD allows (2)"),
        "{err}"
    );
}

#[test]
fn jsonl_numeric_ids_keep_their_text() {
    let dir = test_dir("numeric_ids");
    let ids = [
        "18446744073709551617",
        "18446744073709551618",
        "3.0",
        "3",
        "4e0",
        "-0",
    ];
    let body: String = ids
        .iter()
        .map(|id| format!("{{\"id\":{id},\"amount\":1,\"currency\":\"USD\",\"status\":\"ok\"}}\n"))
        .collect();
    let path = write(&dir, "ids.jsonl", body.as_bytes());
    let keys: Vec<String> = read_all(
        spec(path, "id", &["amount", "status"], AmountFormat::Minor),
        &amount_and("status"),
    )
    .unwrap()
    .into_iter()
    .map(|r| r.key)
    .collect();
    assert_eq!(keys, ids);
}

#[test]
fn jsonl_repeated_field_is_an_error_naming_file_line_and_field() {
    let dir = test_dir("repeated_field");
    for (name, line, field) in [
        (
            "top.jsonl",
            "{\"id\":\"b\",\"amount\":1,\"amount\":2,\"currency\":\"USD\",\"status\":\"ok\"}",
            "amount",
        ),
        (
            "nested.jsonl",
            "{\"id\":\"b\",\"amount\":1,\"currency\":\"USD\",\"status\":\"ok\",\"meta\":{\"k\":1,\"k\":1}}",
            "meta.k",
        ),
    ] {
        let body = format!(
            "{{\"id\":\"a\",\"amount\":1,\"currency\":\"USD\",\"status\":\"ok\"}}\n{line}\n"
        );
        let path = write(&dir, name, body.as_bytes());
        let err = read_all(
            spec(path.clone(), "id", &["amount", "status"], AmountFormat::Minor),
            &amount_and("status"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(&format!("{} line 2", path.display())), "{err}");
        assert!(
            err.contains(&format!("field `{field}` appears more than once")),
            "{err}"
        );
    }
}

#[test]
fn jsonl_invalid_utf8_names_file_and_line() {
    let dir = test_dir("jsonl_utf8");
    let path = write(
        &dir,
        "latin1.jsonl",
        b"{\"id\":\"a\",\"amount\":1,\"currency\":\"USD\",\"status\":\"ok\"}\n\n{\"id\":\"b\",\"amount\":1,\"currency\":\"USD\",\"status\":\"caf\xe9\"}\n",
    );
    let err = read_all(
        spec(
            path.clone(),
            "id",
            &["amount", "status"],
            AmountFormat::Minor,
        ),
        &amount_and("status"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains(&format!("{} line 3", path.display())), "{err}");
    assert!(err.contains("not valid UTF-8"), "{err}");
}

#[test]
fn csv_repeated_column_after_trimming_is_an_error_naming_file_line_and_column() {
    let dir = test_dir("repeated_column");
    for (name, header) in [
        ("plain.csv", "id,amount,amount,currency,status"),
        ("spaced.csv", "id,amount, amount ,currency,status"),
        ("key.csv", "id,amount,currency,status,id"),
    ] {
        let path = write(
            &dir,
            name,
            format!("{header}\nch_1,1,2,usd,ok\n").as_bytes(),
        );
        let err = read_all(
            spec(
                path.clone(),
                "id",
                &["amount", "status"],
                AmountFormat::Minor,
            ),
            &amount_and("status"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(&format!("{} line 1", path.display())), "{err}");
        assert!(
            err.contains("appears more than once in the header"),
            "{err}"
        );
        let col = if name == "key.csv" { "id" } else { "amount" };
        assert!(err.contains(&format!("column `{col}`")), "{err}");
    }
    // A repeated column recon does not read is not ambiguous for it.
    let path = write(
        &dir,
        "unused.csv",
        b"id,amount,currency,status,note,note\nch_1,1,usd,ok,a,b\n",
    );
    let records = read_all(
        spec(path, "id", &["amount", "status"], AmountFormat::Minor),
        &amount_and("status"),
    )
    .unwrap();
    assert_eq!(records.len(), 1);
}

#[test]
fn sign_only_amounts_are_not_numbers_not_too_large() {
    let dir = test_dir("sign_only");
    for (i, amount) in ["-", "--5", "+-1"].iter().enumerate() {
        let path = write(
            &dir,
            &format!("s{i}.csv"),
            format!("id,amount,currency,status\nch_1,{amount},usd,ok\n").as_bytes(),
        );
        let err = read_all(
            spec(
                path.clone(),
                "id",
                &["amount", "status"],
                AmountFormat::Minor,
            ),
            &amount_and("status"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(&format!("{} line 2", path.display())), "{err}");
        assert!(
            err.contains(&format!("`{amount}` is not a number")),
            "{err}"
        );
        assert!(!err.contains("too large"), "{err}");
    }
}

/// Every key and note of a reader's records, with each record's line.
fn keys_of(reader: &mut FileReader) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    reader
        .for_each(|key, values, location| {
            let note = values[1].to_owned_value();
            out.push((key.to_string(), format!("{note:?}"), location().0));
            Ok::<(), std::convert::Infallible>(())
        })
        .map_err(|e| match e {
            ReadError::Connector(c) => c.to_string(),
            ReadError::Caller(never) => match never {},
        })
        .unwrap();
    out
}

/// An export replaced while it is read (a new version written under a
/// temporary name and renamed over the path, as export jobs do), then
/// removed: the parts cut before, the rest of the file after a place, and
/// a second pass from the start all read the file the reader opened, not
/// what the path names now; together the parts read exactly the records
/// one pass reads, never half one version and half the next.
#[test]
fn parts_rest_and_second_pass_read_the_opened_file_when_its_path_is_replaced() {
    let dir = test_dir("replaced_while_read");
    let rows = |tag: &str| {
        let mut s = String::from("id,amount,currency,note\n");
        for i in 0..3000 {
            s.push_str(&format!("ch_{i:05},{},usd,{tag}{i}\n", 100 + i));
        }
        s
    };
    let path = write(&dir, "export.csv", rows("old").as_bytes());
    let spec = spec(path.clone(), "id", &["amount", "note"], AmountFormat::Minor);
    let schema = amount_and("note");
    let whole = read_all(spec.clone(), &schema).unwrap();
    assert_eq!(whole.len(), 3000);

    let mut first = FileReader::open(spec.clone(), &schema).unwrap();
    let cuts = first.cut(3, 1).unwrap().expect("cut into parts");
    assert_eq!(cuts.len(), 4, "{cuts:?}");
    // A new version (longer rows, other notes) renamed over the path.
    let new = write(&dir, "export.csv.tmp", rows("new-version-").as_bytes());
    fs::rename(&new, &path).unwrap();
    assert!(fs::read_to_string(&path).unwrap().contains("new-version-"));

    let mut read = keys_of(&mut first);
    for w in cuts.windows(2).skip(1) {
        let mut part = first.part(w[0], w[1]).unwrap();
        read.extend(keys_of(&mut part));
        assert!(part.ended_at_stop());
    }
    assert_eq!(read.len(), 3000);
    for (r, w) in read.iter().zip(&whole) {
        assert_eq!(r.0, w.key);
        assert!(r.1.contains("old"), "{r:?}");
    }
    // Then the path is removed: the second pass and a rest still read.
    fs::remove_file(&path).unwrap();
    let mut again = first.reopen().unwrap();
    let again = keys_of(&mut again);
    assert_eq!(again.len(), 3000);
    assert!(again.iter().all(|r| r.1.contains("old")), "{:?}", again[0]);
    assert_eq!(
        again.last().unwrap().2,
        format!("{} line 3001", path.display())
    );

    // The rest from a place in a pass, 1,234 records in: its lines
    // are the file's.
    let mut pass = first.reopen().unwrap();
    let mut n = 0;
    pass.for_each_while(|_, _, _| {
        n += 1;
        Ok::<bool, std::convert::Infallible>(n < 1234)
    })
    .map_err(|_| "read")
    .unwrap();
    let rest = keys_of(&mut first.rest(pass.place().unwrap()).unwrap());
    let from = 1234;
    assert_eq!(rest.len(), 3000 - from);
    assert!(rest.iter().all(|r| r.1.contains("old")));
    assert_eq!(rest[0].0, whole[from].key);
    assert_eq!(rest[0].2, format!("{} line {}", path.display(), from + 2));
}

/// A cut lands just after the first line end at or after its place, even
/// one many reads away (the search reads a little at a time), and a file
/// whose line ends are further apart than the search (1 MiB) is not cut.
#[test]
fn cuts_fall_after_the_next_line_end_however_far_and_not_past_the_search() {
    let dir = test_dir("cut_far_line_ends");
    // Rows of 40 KiB notes: a cut's place usually falls inside one, its
    // line end more than two 16 KiB reads away.
    let note = "n".repeat(40 << 10);
    let mut csv = String::from("id,amount,currency,note\n");
    for i in 0..40 {
        csv.push_str(&format!("ch_{i:03},{},usd,{note}{i}\n", 100 + i));
    }
    let path = write(&dir, "long.csv", csv.as_bytes());
    let spec_long = spec(path.clone(), "id", &["amount", "note"], AmountFormat::Minor);
    let schema = amount_and("note");
    let mut first = FileReader::open(spec_long.clone(), &schema).unwrap();
    let cuts = first.cut(8, 1).unwrap().expect("cut into parts");
    assert_eq!(cuts.len(), 9, "{cuts:?}");
    let bytes = csv.as_bytes();
    let header = csv.find('\n').unwrap() as u64 + 1;
    for (k, &at) in cuts.iter().enumerate().skip(1).take(7) {
        let place = header + (bytes.len() as u64 - header) * k as u64 / 8;
        let next = place
            + bytes[place as usize..]
                .iter()
                .position(|&b| b == b'\n')
                .unwrap() as u64
            + 1;
        assert_eq!(at, next, "cut {k} of {cuts:?}");
    }
    let mut read = keys_of(&mut first);
    for w in cuts.windows(2).skip(1) {
        read.extend(keys_of(&mut first.part(w[0], w[1]).unwrap()));
    }
    let keys: Vec<String> = read.into_iter().map(|r| r.0).collect();
    let want: Vec<String> = (0..40).map(|i| format!("ch_{i:03}")).collect();
    assert_eq!(keys, want);

    // One record of 1.5 MiB: no line end within the search of a cut.
    let mut csv = String::from("id,amount,currency,note\n");
    csv.push_str(&format!("ch_big,1,usd,{}\n", "x".repeat(3 << 19)));
    csv.push_str("ch_end,2,usd,last\n");
    let path = write(&dir, "huge.csv", csv.as_bytes());
    let spec_huge = spec(path, "id", &["amount", "note"], AmountFormat::Minor);
    let mut reader = FileReader::open(spec_huge, &schema).unwrap();
    assert_eq!(reader.cut(4, 1).unwrap(), None);
    let keys: Vec<String> = keys_of(&mut reader).into_iter().map(|r| r.0).collect();
    assert_eq!(keys, ["ch_big", "ch_end"]);
}
