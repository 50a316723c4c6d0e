"""static_routes_first reorders a route table without changing which route answers any
request (Starlette's rule: the first route matching path and method, else the first matching
the path, for its 405), whatever the table: fixed paths, parameters, `:path` parameters that
swallow slashes, one path under several methods, duplicates."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from starlette.routing import BaseRoute, Match, Route

from git_xet.server.route_order import static_routes_first

segments = st.sampled_from(["a", "b", "v1", "x-y", "{p}", "{q:path}"])
# (a parameter's name once per path: p0, q1, ...)
paths = st.lists(segments, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(s.replace("{p", f"{{p{i}").replace("{q", f"{{q{i}") for i, s in enumerate(parts)))
methods = st.sampled_from([None, ["GET"], ["POST"], ["PUT", "POST"]])
requests = st.tuples(st.lists(st.sampled_from(["a", "b", "v1", "x-y", "zz"]), min_size=1, max_size=5).map(lambda p: "/" + "/".join(p)), st.sampled_from(["GET", "POST", "PUT", "HEAD"]))


async def _endpoint(request):  # never called: the tests only resolve
    raise AssertionError


def _answering(routes: list[BaseRoute], path: str, method: str) -> BaseRoute | None:
    scope = {"type": "http", "path": path, "method": method, "root_path": ""}
    partial = None
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route
        if match is Match.PARTIAL and partial is None:
            partial = route
    return partial


@given(st.lists(st.tuples(paths, methods), min_size=1, max_size=12), st.lists(requests, min_size=1, max_size=20), st.data())
def test_every_request_is_answered_by_the_same_route(table, asked, data) -> None:
    routes: list[BaseRoute] = [Route(path, _endpoint, methods=m) for path, m in table]
    hot = data.draw(st.lists(st.sampled_from([path for path, _ in table]), max_size=2))
    reordered = static_routes_first(routes, hot)
    assert sorted(map(id, reordered)) == sorted(map(id, routes))
    for path, method in [*asked, *((r.path, "GET") for r in routes if "{" not in r.path)]:
        assert _answering(reordered, path, method) is _answering(routes, path, method), (path, method)


def test_a_fixed_path_goes_first_unless_an_earlier_route_matches_it() -> None:
    shadow, param, fixed, hot = Route("/{x}/lfs", _endpoint), Route("/v1/{p}", _endpoint), Route("/v2/shards", _endpoint), Route("/hot", _endpoint)
    shadowed = Route("/repo/lfs", _endpoint)
    assert static_routes_first([shadow, param, fixed, shadowed, hot], hot=("/hot",)) == [hot, fixed, shadow, param, shadowed]
