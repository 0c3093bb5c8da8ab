//! A client of the operator console that follows no redirect, keeping the session cookie and
//! its CSRF token (the console tests: `ui/`, `operators.rs`).

use tenantry_remote_http::RemoteTls;

/// Percent-encodes a form value: every byte but the unreserved characters of RFC 3986.
pub fn encode(value: &str) -> String {
    const RESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(value, RESERVED).to_string()
}

/// A form body of `fields`, each value percent-encoded.
pub fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A console client that follows no redirect (so the tests see them).
pub struct Console {
    /// The client (no redirects followed).
    pub http: reqwest::Client,
    /// The service's base URL.
    pub base: String,
    /// The session cookie (`name=value`), once logged in.
    pub cookie: Option<String>,
    /// The session's CSRF token, once logged in.
    pub csrf: Option<String>,
}

/// A response of the console.
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The `location` header, if any.
    pub location: Option<String>,
    /// All headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body as text.
    pub body: String,
}

impl Console {
    /// A client of the console at `base`, not logged in.
    pub fn new(base: &str) -> Self {
        Self {
            http: tenantry_remote_http::client::client_builder(&RemoteTls::default())
                .unwrap()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base: base.to_owned(),
            cookie: None,
            csrf: None,
        }
    }

    /// Sends `request` with the session cookie, if any.
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let request = match &self.cookie {
            Some(cookie) => request.header("cookie", cookie),
            None => request,
        };
        let response = request.send().await.unwrap();
        let headers = response.headers().clone();
        Answer {
            status: response.status().as_u16(),
            location: headers
                .get("location")
                .map(|v| v.to_str().unwrap().to_owned()),
            body: response.text().await.unwrap(),
            headers,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Answer {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    /// `POST path` with the form `fields`.
    pub async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Answer {
        self.send(
            self.http
                .post(format!("{}{path}", self.base))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form(fields)),
        )
        .await
    }

    /// Logs in with `token`; keeps the cookie and the page's CSRF token.
    pub async fn login(&mut self, token: &str) -> Answer {
        let answer = self.post("/ui/login", &[("token", token)]).await;
        if let Some(set) = answer.headers.get("set-cookie") {
            let pair = set.to_str().unwrap().split(';').next().unwrap().to_owned();
            self.cookie = Some(pair);
            let page = self.get("/ui").await;
            assert_eq!(page.status, 200, "{}", page.body);
            self.csrf = Some(csrf_of(&page.body));
        }
        answer
    }

    /// The session's CSRF token (after a login).
    pub fn csrf(&self) -> &str {
        self.csrf.as_deref().unwrap()
    }
}

/// The CSRF token in a page's forms.
pub fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with the CSRF token")
        + 19;
    page[at..].split('"').next().unwrap().to_owned()
}
