//! What the crate does without its default features: the paths that only
//! compile when a feature is off. `scripts/test` runs this binary with
//! `--no-default-features --features redis` (the tests add `config` and
//! `metrics`); under `--all-features` its tests compile away.

#[cfg(all(feature = "config", not(feature = "axum")))]
mod without_axum {
    use tower_ratelimit::config::{Limits, LimitsFile};
    use tower_ratelimit::key::{KeyExtractor, RequestHead};
    use tower_ratelimit::layer::{PolicyResolver, RoutePolicies};
    use tower_ratelimit::Policy;

    fn request(method: &str, path: &str) -> http::Request<()> {
        http::Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
    }

    /// Without axum's route templates, routes are matched by path.
    #[test]
    fn routes_are_found_by_their_path() {
        let routes = RoutePolicies::new().route("/api/search", "search = 10/min".parse().unwrap());
        let found = routes.resolve(&RequestHead::from(&request("GET", "/api/search")));
        assert_eq!(
            found.map(|p| p.limits()[0].name().to_owned()),
            Some("search".to_owned())
        );
        assert!(routes
            .resolve(&RequestHead::from(&request("GET", "/api/other")))
            .is_none());
    }

    /// A limits file's `endpoint` key is the method and the path.
    #[test]
    fn a_file_s_endpoint_key_is_the_method_and_the_path() {
        let limits = Limits::new(
            LimitsFile::parse(
                "[[routes]]\npath = \"/api/search\"\nkey = \"endpoint\"\nlimits = \"search = 10/min\"\n",
            )
            .unwrap(),
        );
        let get = request("GET", "/api/search");
        let key = limits.keys().extract(&RequestHead::from(&get)).unwrap();
        assert_eq!(key.namespace(), "endpoint");
        assert_eq!(key.value(), b"GET /api/search");
        let policy: Option<Policy> = limits.policies().resolve(&RequestHead::from(&get));
        assert_eq!(policy.unwrap().limits()[0].name(), "search");
    }
}

#[cfg(all(feature = "redis", not(feature = "redis-cluster")))]
mod redis_without_its_topologies {
    use tower_ratelimit::backend::RedisBackend;

    fn refusal(url: &str) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(RedisBackend::builder(url).connect())
            .unwrap_err()
            .to_string()
    }

    /// A cluster URL without the feature is an error that says which.
    #[test]
    fn a_cluster_url_names_the_feature_it_needs() {
        let error = refusal("redis+cluster://127.0.0.1:7000,127.0.0.1:7001");
        assert!(error.contains("redis-cluster feature"), "{error}");
    }

    /// So is a Sentinel URL.
    #[cfg(not(feature = "redis-sentinel"))]
    #[test]
    fn a_sentinel_url_names_the_feature_it_needs() {
        let error = refusal("redis+sentinel://127.0.0.1:26379/mymaster");
        assert!(error.contains("redis-sentinel feature"), "{error}");
    }
}
