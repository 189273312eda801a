//! Order amounts: a JSON number or a decimal string, at least 0, at most 2 decimal places.

use rust_decimal::Decimal;
use serde::Deserialize;

/// An amount as the client sent it, before validation.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(
    untagged,
    expecting = "amount must be a JSON number or a decimal string"
)]
pub enum AmountInput {
    Number(serde_json::Number),
    Text(String),
}

/// Parses and checks an amount; the error says what is wrong.
pub fn parse(input: &AmountInput) -> Result<Decimal, String> {
    let text = match input {
        AmountInput::Number(n) => n.to_string(),
        AmountInput::Text(s) => {
            shared::text::check("amount", s)?;
            s.trim().to_owned()
        }
    };
    let value = text
        .parse::<Decimal>()
        .or_else(|_| Decimal::from_scientific(&text))
        .map_err(|_| format!("amount {text:?} is not a decimal number"))?;
    if value.is_sign_negative() && !value.is_zero() {
        return Err("amount must not be negative".into());
    }
    let value = value.normalize();
    if value.scale() > 2 {
        return Err("amount must have at most 2 decimal places".into());
    }
    if value > max_amount() {
        return Err(format!("amount must be at most {}", max_amount()));
    }
    let mut value = value.abs();
    value.rescale(2);
    Ok(value)
}

/// The largest amount `numeric(14, 2)` holds: twelve digits before the point.
fn max_amount() -> Decimal {
    Decimal::new(99_999_999_999_999, 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(raw: &str) -> AmountInput {
        AmountInput::Number(serde_json::from_str(raw).expect("a JSON number"))
    }

    #[test]
    fn valid_amounts_are_kept_with_two_places() {
        let cases = [
            (number("200.0"), "200.00"),
            (number("0"), "0.00"),
            (number("19.99"), "19.99"),
            (number("1e2"), "100.00"),
            (AmountInput::Text("12.5".into()), "12.50"),
            (AmountInput::Text("-0".into()), "0.00"),
            (
                AmountInput::Text("999999999999.99".into()),
                "999999999999.99",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(
                parse(&input).map(|d| d.to_string()),
                Ok(expected.to_owned()),
                "{input:?}"
            );
        }
    }

    #[test]
    fn invalid_amounts_are_refused() {
        let cases = [
            number("-1"),
            number("0.001"),
            number("1e15"),
            AmountInput::Text("abc".into()),
            AmountInput::Text("".into()),
            AmountInput::Text("1.234".into()),
            AmountInput::Text("NaN".into()),
            AmountInput::Text("\t12.50".into()),
            AmountInput::Text("12.50\n".into()),
            AmountInput::Text("1\u{0}".into()),
        ];
        for input in cases {
            assert!(parse(&input).is_err(), "{input:?}");
        }
    }
}
