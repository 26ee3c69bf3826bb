(function () {
  var svg = document.getElementById("timeline-svg");
  if (!svg || !svg.getScreenCTM) { return; }
  var x0 = parseFloat(svg.getAttribute("data-x0")), pw = parseFloat(svg.getAttribute("data-pw"));
  var span = parseFloat(svg.getAttribute("data-span-ns")), wall0 = parseFloat(svg.getAttribute("data-wall0-ms"));
  var wallNs = parseFloat(svg.getAttribute("data-wall0-ns"));
  var line = document.getElementById("cursor"), label = document.getElementById("cursor-label");
  var pt = svg.createSVGPoint();
  function hide() { line.setAttribute("visibility", "hidden"); label.setAttribute("visibility", "hidden"); }
  svg.addEventListener("mousemove", function (ev) {
    var m = svg.getScreenCTM();
    if (!m) { return; }
    pt.x = ev.clientX; pt.y = ev.clientY;
    var p = pt.matrixTransform(m.inverse());
    if (p.x < x0 || p.x > x0 + pw) { hide(); return; }
    var ns = (p.x - x0) / pw * span;
    line.setAttribute("x1", p.x); line.setAttribute("x2", p.x);
    var text = "+" + (ns / 1e9).toFixed(span < 1e10 ? 4 : 2) + " s";
    if (wall0 > 0) {
      var ms = wall0 + (wallNs + ns) / 1e6;
      text += "   " + new Date(ms).toISOString().substring(11, 23) + " UTC";
    }
    label.textContent = text;
    label.setAttribute("x", Math.min(p.x + 6, x0 + pw - 190));
    line.setAttribute("visibility", "visible"); label.setAttribute("visibility", "visible");
  });
  svg.addEventListener("mouseleave", hide);
  document.documentElement.setAttribute("data-timeline-ready", "1");
})();
