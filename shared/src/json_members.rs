//! Renaming an object's members in place, as redaction does to a name that held a
//! secret: a new name another member already has is numbered (`name#2`), so no member
//! is lost.

use serde_json::{Map, Value};

/// Renames each `(old, new)` member of `members`.
pub fn rename(members: &mut Map<String, Value>, renames: Vec<(String, String)>) {
    for (old, new) in renames {
        let Some(value) = members.remove(&old) else {
            continue;
        };
        let mut name = new.clone();
        let mut number = 2;
        while members.contains_key(&name) {
            name = format!("{new}#{number}");
            number += 1;
        }
        members.insert(name, value);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_name_taken_already_is_numbered_and_no_member_is_lost() {
        let mut value = json!({ "a": 1, "b": 2, "x": 3 });
        let Value::Object(members) = &mut value else {
            unreachable!()
        };
        rename(
            members,
            vec![("a".into(), "x".into()), ("b".into(), "x".into())],
        );
        assert_eq!(value, json!({ "x": 3, "x#2": 1, "x#3": 2 }));
    }
}
