// Draws the round views of the toporoute report from the JSON blob in #run-data.
// Every string from the run is model output or derived from it: it only ever goes in via textContent or
// setAttribute, never innerHTML.
(function () {
  "use strict";

  var SVG_NS = "http://www.w3.org/2000/svg";
  var LEVEL_COLORS = ["#4C72B0", "#55A868", "#DD8452", "#8172B3", "#C44E52", "#937860", "#DA8BC3", "#8C8C8C"];
  var drawn = 0;
  var failures = 0;

  function arr(x) { return Array.isArray(x) ? x : []; }
  function obj(x) { return x !== null && typeof x === "object" && !Array.isArray(x) ? x : {}; }
  function str(x) { return x === null || x === undefined ? "" : String(x); }
  // traces count rounds from 0; people (and the prompts) count from 1
  function roundLabel(r) { return typeof r === "number" ? String(r + 1) : str(r); }
  function num(x) { return typeof x === "number" && isFinite(x); }
  function fmt(x, digits) { return num(x) ? x.toFixed(digits) : "—"; }
  // "1 edge", "3 edges"
  function counted(n, noun) { return n + " " + noun + (n === 1 ? "" : "s"); }

  function h(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }

  function add(parent) {
    for (var i = 1; i < arguments.length; i++) {
      if (arguments[i]) { parent.appendChild(arguments[i]); }
    }
    return parent;
  }

  function put(parent, child) {
    parent.appendChild(child);
    return child;
  }

  function s(tag, attrs, text) {
    var e = document.createElementNS(SVG_NS, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }

  function chip(text, cls) { return h("span", "chip" + (cls ? " " + cls : ""), text); }

  // ------------------------------------------------------------------------------------------------ the graph

  function edgeList(rd, pos) {
    var removed = {};
    arr(rd.removed).forEach(function (e) { removed[str(obj(e).src) + "\u0000" + str(obj(e).dst)] = true; });
    var seen = {};
    var out = [];
    function push(e, score) {
      var src = str(obj(e).src), dst = str(obj(e).dst), key = src + "\u0000" + dst;
      // self-loops carry no message and unknown names have no node: nothing to draw
      if (seen[key] || src === dst || !pos[src] || !pos[dst]) { return; }
      seen[key] = true;
      out.push({ src: src, dst: dst, score: num(score) ? score : null, removed: !!removed[key] });
    }
    arr(rd.edges).forEach(function (e) { push(e, obj(e).score); });
    arr(rd.removed).forEach(function (e) { push(e, null); });  // a back edge missing from edges still shows
    return out;
  }

  function drawGraph(rd) {
    var agents = arr(rd.agents).map(str);
    var roles = arr(rd.roles).map(str);
    var levels = arr(rd.levels);
    var order = arr(rd.order).map(str);
    var inbox = obj(rd.inbox);
    var n = agents.length;
    // a lone agent needs no circle of room: a short strip keeps single-call rounds compact
    var W = 460, H = n > 1 ? 340 : 110, cx = W / 2, cy = n > 1 ? H / 2 : 40, r = 17;
    var R = n > 1 ? Math.min(118, 46 + 16 * n) : 0;
    var pos = {};
    agents.forEach(function (a, i) {
      var t = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(n, 1);
      pos[a] = { x: cx + R * Math.cos(t), y: cy + R * Math.sin(t), t: t, i: i };
    });
    var edges = edgeList(rd, pos);
    var routed = {};
    arr(obj(rd.usage).edges).forEach(function (e) {
      routed[str(obj(e).src) + "\u0000" + str(obj(e).dst)] = obj(e).tokens;
    });

    var svg = s("svg", { "class": "round-graph", viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img" });
    svg.setAttribute("aria-label", "Round " + roundLabel(rd.round) + ": " + counted(n, "agent") + ", " +
      counted(edges.length, "edge"));
    var gEdges = put(svg, s("g", { "class": "edges" }));
    var gLabels = put(svg, s("g", { "class": "edge-labels" }));
    var gNodes = put(svg, s("g", { "class": "nodes" }));

    edges.forEach(function (e) {
      var p = pos[e.src], q = pos[e.dst];
      var dx = q.x - p.x, dy = q.y - p.y, d = Math.sqrt(dx * dx + dy * dy) || 1;
      // bend every edge to the right of its direction, so a reciprocal pair takes two separate arcs
      var bend = 0.14 * d;
      var c = { x: (p.x + q.x) / 2 - (dy / d) * bend, y: (p.y + q.y) / 2 + (dx / d) * bend };
      var a = toward(p, c, r), b = toward(q, c, r + 2);
      var path = s("path", {
        "class": "edge" + (e.removed ? " removed" : "") + (e.score === null ? " unscored" : ""),
        d: "M" + a.x.toFixed(1) + "," + a.y.toFixed(1) + " Q" + c.x.toFixed(1) + "," + c.y.toFixed(1) +
          " " + b.x.toFixed(1) + "," + b.y.toFixed(1),
        "marker-end": e.removed ? "url(#tr-arrow-removed)" : "url(#tr-arrow)",
        "data-src": e.src,
        "data-dst": e.dst
      });
      if (e.score !== null) { path.setAttribute("data-score", String(e.score)); }
      var tip = e.src + " \u2192 " + e.dst;
      if (e.score !== null) { tip += " · score " + e.score.toFixed(3); }
      var tokens = routed[e.src + "\u0000" + e.dst];
      if (num(tokens)) { tip += " · " + tokens + " tokens routed"; }
      if (e.removed) { tip += " · back edge against σ (removed to break a cycle)"; }
      add(path, s("title", {}, tip));
      add(gEdges, path);
      if (e.score !== null) {
        var mx = 0.25 * a.x + 0.5 * c.x + 0.25 * b.x, my = 0.25 * a.y + 0.5 * c.y + 0.25 * b.y;
        add(gLabels, s("text", { "class": "edge-label", x: mx.toFixed(1), y: (my + 3).toFixed(1) },
          e.score.toFixed(2)));
      }
    });

    if (n > 1 && !edges.length) {
      add(gLabels, s("text", { "class": "no-edges", x: cx, y: cy + 4 }, "no edges this round"));
    }
    agents.forEach(function (name, i) {
      var p = pos[name];
      var level = num(levels[i]) ? levels[i] : 0;
      var rank = order.indexOf(name);
      var g = put(gNodes, s("g", { "class": "agent" }));
      add(g, s("circle", {
        "class": "node", cx: p.x.toFixed(1), cy: p.y.toFixed(1), r: r,
        fill: LEVEL_COLORS[Math.abs(level) % LEVEL_COLORS.length], "data-agent": name
      }));
      if (rank >= 0) {
        add(g, s("text", { "class": "node-rank", x: p.x.toFixed(1), y: (p.y + 4.5).toFixed(1) }, rank + 1));
      }
      var cos = Math.cos(p.t), sin = Math.sin(p.t);
      var lx = n > 1 ? p.x + (r + 7) * cos : p.x, ly = n > 1 ? p.y + (r + 7) * sin : p.y + r + 16;
      var anchor = n < 2 || Math.abs(cos) < 0.3 ? "middle" : (cos > 0 ? "start" : "end");
      if (n > 1 && Math.abs(cos) < 0.3) { ly += sin > 0 ? 12 : -4; } else { ly += 4; }
      add(g, s("text", { "class": "node-label", x: lx.toFixed(1), y: ly.toFixed(1), "text-anchor": anchor }, name));
      var tip = name + (roles[i] ? " (" + roles[i] + ")" : "") + " · σ position " + (rank + 1) +
        " · level " + level;
      var from = arr(inbox[name]).map(str);
      if (from.length) { tip += " · inbox: " + from.join(", "); }
      add(g, s("title", {}, tip));
    });
    return svg;
  }

  function toward(p, c, dist) {
    var dx = c.x - p.x, dy = c.y - p.y, d = Math.sqrt(dx * dx + dy * dy) || 1;
    return { x: p.x + (dx / d) * dist, y: p.y + (dy / d) * dist };
  }

  function legend(rd) {
    var div = h("div", "legend");
    if (arr(rd.edges).length) { add(div, h("span", "lg-edge", "→ routed edge" + (rd.scored ? " (score)" : ""))); }
    if (arr(rd.removed).length) { add(div, h("span", "lg-removed", "⇢ back edge removed for σ")); }
    add(div, h("span", null, "number: position in σ · colour: level"));
    return div;
  }

  // ----------------------------------------------------------------------------------------------- the round

  function renderRound(rd) {
    var agents = arr(rd.agents).map(str);
    var stats = obj(rd.stats), timing = obj(rd.timing);
    var box = h("div", "round");
    var head = add(h("div", "round-head"), h("h4", null, "Round " + roundLabel(rd.round)));
    var nEdges = num(stats.edges) ? stats.edges : arr(rd.edges).length;
    var team = agents.length > 1;
    if (team) { add(head, chip(counted(nEdges, "edge"))); }
    if (team && num(stats.density)) { add(head, chip("density " + fmt(stats.density, 2))); }
    if (!team) { add(head, chip("single agent")); }
    if (num(stats.reciprocity) && nEdges) { add(head, chip("reciprocity " + fmt(stats.reciprocity, 2))); }
    if (num(stats.jaccard_similarity_prev)) {
      add(head, chip("Jaccard similarity to previous " + fmt(stats.jaccard_similarity_prev, 2)));
    }
    if (rd.is_dag === false) {
      add(head, chip("cycle: " + counted(arr(rd.removed).length, "back edge") + " removed", "warn"));
    } else if (rd.is_dag === true && agents.length > 1) {
      add(head, chip("DAG"));
    }
    if (!rd.scored && agents.length > 1) { add(head, chip("fixed topology (unscored)")); }
    if (num(timing.round_s)) {
      add(head, chip(fmt(timing.round_s, 2) + " s (LLM " + fmt(timing.llm_s, 2) + " s, routing " +
        fmt(timing.routing_s, 3) + " s)", "time"));
    }
    add(box, head);
    if (rd.goal) {
      add(box, add(h("p", "goal"), h("b", null, "Goal "), h("span", null, str(rd.goal))));
    }

    var body = put(box, h("div", "round-body"));
    var graphCol = put(body, h("div", "graph-col"));
    add(graphCol, drawGraph(rd), legend(rd));
    drawn += 1;

    var info = put(body, h("div", "info-col"));
    var levels = arr(rd.levels);
    var orderBox = put(info, h("div", "order"));
    add(orderBox, h("h5", null, "Order σ"));
    var ol = put(orderBox, h("ol"));
    arr(rd.order).forEach(function (name) {
      var i = agents.indexOf(str(name));
      var li = put(ol, h("li", null, str(name)));
      if (i >= 0 && num(levels[i])) { add(li, h("small", null, " level " + levels[i])); }
    });
    add(info, renderManager(rd.manager));
    add(info, renderAgents(rd));
    add(box, renderMessages(rd));
    return box;
  }

  function renderManager(m) {
    var div = h("div", "manager");
    add(div, h("h5", null, "Manager"));
    if (m === null || m === undefined) {
      add(div, h("p", "muted", "no manager this round"));
      return div;
    }
    m = obj(m);
    var decision = h("p", "decision " + (m.is_complete ? "complete" : "continue"),
      m.is_complete ? "✓ task complete" : "↻ continue");
    add(div, decision);
    if (m.next_goal) { add(div, add(h("p"), h("b", null, "Next goal "), h("span", null, str(m.next_goal)))); }
    if (m.public) { add(div, add(h("p"), h("b", null, "Says "), h("span", null, str(m.public)))); }
    var desc = obj(m.descriptors);
    if (desc.query) { add(div, add(h("p"), h("b", null, "Needs "), h("span", null, str(desc.query)))); }
    if (desc.key) { add(div, add(h("p"), h("b", null, "Offers "), h("span", null, str(desc.key)))); }
    if (m.parse_error) { add(div, h("p", "parse-error", "parse error: " + str(m.parse_error))); }
    return div;
  }

  function renderAgents(rd) {
    var agents = arr(rd.agents).map(str);
    var roles = arr(rd.roles).map(str);
    var desc = obj(rd.descriptors), need = arr(desc.query), offer = arr(desc.key);
    var inbox = obj(rd.inbox);
    var usage = obj(obj(rd.usage).agents);
    var table = h("table", "agents");
    var tr = put(put(table, h("thead")), h("tr"));
    ["Agent", "Needs", "Offers", "Inbox", "Tokens (in / out)", "Latency", "Calls"].forEach(function (t) {
      add(tr, h("th", null, t));
    });
    var tbody = put(table, h("tbody"));
    function row(name, role, needs, offers, from) {
      var u = obj(usage[name]);
      var r = put(tbody, h("tr"));
      var who = add(h("td", "who"), h("b", null, name));
      if (role) { add(who, h("br"), h("small", null, role)); }
      add(r, who, h("td", "desc", needs), h("td", "desc", offers), h("td", null, from));
      add(r, h("td", "num", num(u.prompt_tokens) ? u.prompt_tokens + " / " + str(u.completion_tokens) : "—"));
      add(r, h("td", "num", num(u.latency_s) ? fmt(u.latency_s, 2) + " s" : "—"));
      var calls = num(u.attempts) ? counted(u.attempts, "attempt") : "—";
      if (u.ok === false) { calls += " · failed"; }
      add(r, h("td", u.ok === false ? "bad" : null, calls));
    }
    agents.forEach(function (name, i) {
      row(name, roles[i], str(need[i]), str(offer[i]), arr(inbox[name]).map(str).join(", ") || "—");
    });
    Object.keys(usage).forEach(function (name) {
      if (agents.indexOf(name) < 0) { row(name, "", "", "", ""); }
    });
    return table;
  }

  function renderMessages(rd) {
    var messages = obj(rd.messages);
    var names = Object.keys(messages);
    var det = h("details", "messages");
    add(det, h("summary", null, "Messages (" + names.length + ")"));
    names.forEach(function (name) {
      var m = obj(messages[name]);
      var div = put(det, h("div", "msg"));
      add(div, h("h6", null, name));
      [["public", "public"], ["private", "private"], ["answer", "answer"]].forEach(function (kv) {
        if (m[kv[0]] === null || m[kv[0]] === undefined || m[kv[0]] === "") { return; }
        add(div, h("div", "msg-label", kv[1]), h("pre", "msg-text", str(m[kv[0]])));
      });
      if (m.parse_error) { add(div, h("p", "parse-error", "parse error: " + str(m.parse_error))); }
    });
    return det;
  }

  // --------------------------------------------------------------------------------------------- the episodes

  function renderEpisode(container, episode) {
    var rounds = arr(obj(episode).rounds);
    if (!rounds.length) {
      add(container, h("p", "note", "No round trace recorded for this episode."));
      return;
    }
    rounds.forEach(function (rd) {
      try {
        add(container, renderRound(obj(rd)));
      } catch (err) {
        failures += 1;
        add(container, h("p", "bad", "Round " + roundLabel(obj(rd).round) + " could not be drawn: " + str(err)));
        if (window.console) { console.error(err); }
      }
    });
  }

  function setOpen(view, open) {
    if (!view) { return; }
    view.hidden = !open;
    var link = document.querySelector('a.toggle[aria-controls="' + view.id + '"]');
    if (link) { link.setAttribute("aria-expanded", open ? "true" : "false"); }
  }

  function wire() {
    document.addEventListener("click", function (ev) {
      var t = ev.target;
      if (!(t instanceof Element)) { return; }
      var link = t.closest("a.toggle");
      if (link) {
        ev.preventDefault();
        var view = document.getElementById(link.getAttribute("aria-controls"));
        setOpen(view, view.hidden);
        return;
      }
      var button = t.closest("button.expand-all, button.collapse-all");
      if (button) {
        var open = button.classList.contains("expand-all");
        var section = document.getElementById("method-" + button.getAttribute("data-method"));
        Array.prototype.forEach.call(section ? section.querySelectorAll("tr.episode-view") : [], function (v) {
          setOpen(v, open);
        });
      }
    });
    var target = location.hash ? document.getElementById(location.hash.slice(1)) : null;
    if (target && target.classList.contains("episode-view")) {
      setOpen(target, true);
      target.scrollIntoView();
    }
  }

  function main() {
    var data = obj(JSON.parse(document.getElementById("run-data").textContent));
    var methods = arr(data.methods);
    Array.prototype.forEach.call(document.querySelectorAll("div.rounds"), function (container) {
      var m = obj(methods[Number(container.getAttribute("data-method"))]);
      var episode = arr(m.episodes)[Number(container.getAttribute("data-episode"))];
      try {
        renderEpisode(container, episode);
      } catch (err) {
        failures += 1;
        add(container, h("p", "bad", "This episode could not be drawn: " + str(err)));
        if (window.console) { console.error(err); }
      }
    });
    wire();
    document.body.dataset.renderErrors = String(failures);
    document.body.dataset.rendered = String(drawn);
  }

  main();
})();
