//! `per_page`/`page` slicing and GitHub's absolute `link` header.

use super::*;

/// Slices a list per `per_page`/`page` and adds GitHub's absolute `link` header.
pub(super) fn paginate(
    ctx: &Ctx<'_>,
    items: Vec<Value>,
    key: &str,
    extra: Option<(&str, Value)>,
) -> Reply {
    let pairs = ctx.req.query_pairs();
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.parse::<usize>().ok())
    };
    let per_page = get("per_page").map(|p| p.clamp(1, 100)).unwrap_or(30);
    let page = get("page").unwrap_or(1).max(1);
    let total = items.len();
    let last = total.div_ceil(per_page).max(1);
    let slice: Vec<Value> = items
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    let mut body = serde_json::Map::new();
    body.insert("total_count".into(), json!(total));
    if let Some((k, v)) = extra {
        body.insert(k.into(), v);
    }
    body.insert(key.into(), Value::Array(slice));
    let mut reply = Reply::ok(Value::Object(body));
    let link_to = |p: usize| {
        let mut q: Vec<(String, String)> =
            pairs.iter().filter(|(k, _)| k != "page").cloned().collect();
        q.push(("page".into(), p.to_string()));
        let qs = serde_urlencoded::to_string(&q).unwrap_or_default();
        format!("{}{}?{}", ctx.origin, ctx.req.path, qs)
    };
    let mut links = Vec::new();
    if page < last {
        links.push(format!("<{}>; rel=\"next\"", link_to(page + 1)));
        links.push(format!("<{}>; rel=\"last\"", link_to(last)));
    }
    if page > 1 {
        links.push(format!("<{}>; rel=\"prev\"", link_to((page - 1).min(last))));
        links.push(format!("<{}>; rel=\"first\"", link_to(1)));
    }
    if !links.is_empty() {
        reply = reply.header("link", links.join(", "));
    }
    reply
}
