// Autodidax: small fixes and helpers for the site, loaded on every page.
(function () {
  "use strict";
  function ready(f) {
    if (document.readyState !== "loading") f();
    else document.addEventListener("DOMContentLoaded", f);
  }

  // The menu buttons. The theme attaches its click handlers to the first
  // .primary-toggle (and .secondary-toggle) of the page, a button of the top
  // bar that is hidden; the visible ones only showed a tooltip. Forward their
  // clicks to the first one (which opens the menu on a phone, and folds the
  // sidebar away on a wide screen).
  ready(function () {
    [".primary-toggle", ".secondary-toggle"].forEach(function (sel) {
      var all = document.querySelectorAll(sel);
      for (var i = 1; i < all.length; i++) {
        all[i].addEventListener("click", function (e) {
          e.preventDefault();
          e.stopPropagation();
          all[0].click();
        });
      }
    });
  });

  // Pictures. Each is drawn to fit its column, but never so small that its
  // smallest label measures under 10 px (8 px on a phone): a picture that
  // would be is drawn that big, and scrolls inside its frame. A click, a tap
  // or Enter shows it at full size in the same frame; another fits it again.
  // <img> pictures sit in a div.adx-zoom whose CSS variables
  // (book/_ext/pictures.py) give those widths; pictures drawn inside widgets
  // (.adx-fit, from autodidax.viz) are measured here.
  function minLabelPx() { return window.innerWidth >= 992 ? 10 : 8; }
  function natural(svg) {
    var w = svg.width && svg.width.baseVal;
    return w ? w.value : 0;   // the width attribute, in px
  }
  function smallestLabel(svg) {   // px, at natural size
    var vb = svg.viewBox && svg.viewBox.baseVal, min = Infinity;
    svg.querySelectorAll("text").forEach(function (t) {
      var f = parseFloat(t.getAttribute("font-size"));
      if (f > 0 && f < min) min = f;
    });
    return vb && vb.width && isFinite(min) ? min * natural(svg) / vb.width : 0;
  }
  function markPictures(root) {
    root.querySelectorAll(".adx-fit").forEach(function (box) {
      var svg = box.querySelector("svg");
      if (!svg) return;
      var label = smallestLabel(svg), full = natural(svg);
      if (label > 0 && full > 0)
        svg.style.minWidth = Math.min(full, full * minLabelPx() / label) + "px";
      markFrame(box, svg, full);
    });
    document.querySelectorAll(".adx-zoom").forEach(function (box) {
      var img = box.querySelector("img");
      if (!img || !(img.complete && img.naturalWidth)) return;
      var full = parseFloat(getComputedStyle(box).getPropertyValue("--adx-natural")) || img.naturalWidth;
      markFrame(box, img, full);
    });
  }
  function markFrame(box, pic, full) {
    var shrunk = pic.getBoundingClientRect().width < full - 1;
    var zoomable = shrunk || box.classList.contains("adx-full");
    box.classList.toggle("adx-scaled", zoomable);
    if (zoomable) {
      box.tabIndex = 0;
      box.setAttribute("title", box.classList.contains("adx-full")
        ? "click to fit the picture to the column" : "click to see the picture full size");
    }
  }
  function toggle(box) {
    box.classList.toggle("adx-full");
    markPictures(box.parentNode);
    markScrollers();
  }
  var ZOOMABLE = ".adx-fit.adx-scaled, .adx-zoom.adx-scaled";
  document.addEventListener("click", function (e) {
    var box = e.target.closest && e.target.closest(ZOOMABLE);
    if (box && !(e.target.closest("a"))) toggle(box);
  });
  document.addEventListener("keydown", function (e) {
    var box = e.target.closest && e.target.closest(ZOOMABLE);
    if (box && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); toggle(box); }
  });

  // Tables that don't fit their column become cards, one per row: the first
  // cell (the key) heads its card and every other cell is labelled with its
  // column's header. Nothing is cut or scrolled, and the key stays in view.
  function markTables() {
    document.querySelectorAll(".bd-article table").forEach(function (table) {
      var head = table.querySelector("thead tr") || table.querySelector("tr");
      if (head && ![].some.call(head.children, function (c) { return c.tagName !== "TH"; })) {
        head.classList.add("adx-head");
        var heads = [].map.call(head.children, function (th) { return th.innerText.trim(); });
        table.querySelectorAll("tr").forEach(function (tr) {
          if (tr === head) return;
          [].forEach.call(tr.children, function (td, i) {
            if (heads[i] && !td.hasAttribute("data-label")) td.setAttribute("data-label", heads[i]);
          });
        });
      }
      table.classList.remove("adx-cards");
      var box = table.parentElement;
      if (table.scrollWidth > box.clientWidth + 1 || table.getBoundingClientRect().right >
          box.getBoundingClientRect().right + 1)
        table.classList.add("adx-cards");
    });
  }

  // Anything that scrolls sideways says so: a shadow on the side where more is.
  function edges(el) {
    el.classList.toggle("adx-more-right", el.scrollLeft + el.clientWidth < el.scrollWidth - 1);
    el.classList.toggle("adx-more-left", el.scrollLeft > 0);
  }
  function markScrollers() {
    var article = document.querySelector(".bd-article") || document.body;
    article.querySelectorAll("*").forEach(function (el) {
      if (el.scrollWidth <= el.clientWidth + 1) {
        if (el.classList.contains("adx-scrolls")) {
          el.classList.remove("adx-scrolls", "adx-more-right", "adx-more-left");
          el.removeAttribute("aria-description");
        }
        return;
      }
      var ox = getComputedStyle(el).overflowX;
      if (ox !== "auto" && ox !== "scroll") return;
      el.classList.add("adx-scrolls");
      el.setAttribute("aria-description", "scrolls sideways");
      edges(el);
    });
  }
  document.addEventListener("scroll", function (e) {
    if (e.target.classList && e.target.classList.contains("adx-scrolls")) edges(e.target);
  }, true);

  // The widgets' JavaScript (4.5 MB) loads when a widget first comes near
  // the viewport: book/_ext/page_weight.py lists its scripts in
  // #adx-widget-js instead of loading them with the page. They run in order,
  // each after the one before has loaded; the last draws every widget.
  function loadInOrder(list) {
    if (!list.length) return;
    var item = list[0], s = document.createElement("script");
    Object.keys(item.attrs || {}).forEach(function (k) { s.setAttribute(k, item.attrs[k]); });
    if (item.src) {
      s.onload = function () { loadInOrder(list.slice(1)); };
      s.src = item.src;
      document.head.appendChild(s);
    } else {
      s.textContent = item.body;
      document.head.appendChild(s);
      loadInOrder(list.slice(1));
    }
  }
  ready(function () {
    var listed = document.getElementById("adx-widget-js");
    if (!listed) return;
    var scripts = JSON.parse(listed.textContent), started = false;
    function start() { if (!started) { started = true; loadInOrder(scripts); } }
    var views = document.querySelectorAll("script[type='application/vnd.jupyter.widget-view+json']");
    if (!window.IntersectionObserver) return start();
    var near = new IntersectionObserver(function (entries) {
      if (entries.some(function (e) { return e.isIntersecting; })) { near.disconnect(); start(); }
    }, {rootMargin: "600px 0px"});
    views.forEach(function (v) { near.observe(v.parentElement); });
  });

  var pending = null;
  // True when no marking waits to run: what a test waits for after changing a widget.
  window.adxSettled = function () { return pending === null; };
  function refresh() {
    if (pending) return;
    pending = setTimeout(function () {
      pending = null;
      markTables();
      markPictures(document);
      markScrollers();
    }, 100);
  }
  ready(function () {
    refresh();
    window.addEventListener("resize", refresh);
    window.addEventListener("load", refresh);
    // Widgets are drawn after the page loads, and redrawn when one changes
    // (not "class": this script sets classes itself).
    document.addEventListener("change", refresh, true);
    var article = document.querySelector(".bd-article");
    if (article && window.MutationObserver) {
      new MutationObserver(refresh).observe(article, {childList: true, subtree: true,
        attributes: true, attributeFilter: ["style", "hidden"]});
    }
  });

  // Downloading a notebook. Its "In the book" links are relative to this site
  // (../book/..., the notebooks sit in exercises/, beside book/), so a notebook
  // saved anywhere else would lose them: the download rewrites them to this
  // site's absolute addresses, from the notebook's own address. Where fetching
  // isn't possible (a page opened from a file), the plain download runs.
  ready(function () {
    document.querySelectorAll('a[href$=".ipynb"][download]').forEach(function (a) {
      a.addEventListener("click", function (e) {
        if (a.dataset.plain || !window.fetch || !window.Blob) return;
        e.preventDefault();
        var url = new URL(a.getAttribute("href"), document.baseURI);
        fetch(url.href).then(function (r) {
          if (!r.ok) throw new Error(r.status);
          return r.text();
        }).then(function (text) {
          var book = new URL("../book/", url).href;
          var save = document.createElement("a");
          save.href = URL.createObjectURL(new Blob(
            [text.split("](../book/").join("](" + book)], {type: "application/x-ipynb+json"}));
          save.download = a.getAttribute("download") || url.pathname.split("/").pop();
          document.body.appendChild(save);
          save.click();
          save.remove();
        }).catch(function () {
          a.dataset.plain = "1";
          a.click();
        });
      });
    });
  });
})();
