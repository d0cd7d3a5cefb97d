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

  // Pictures drawn inside widgets (.adx-fit, from autodidax.viz) shrink to
  // their column; a click (or Enter) shows one full size, scrolling sideways.
  function natural(svg) {
    var w = svg.width && svg.width.baseVal;
    return w ? w.value : 0;   // the width attribute, in px
  }
  function markPictures(root) {
    root.querySelectorAll(".adx-fit").forEach(function (box) {
      var svg = box.querySelector("svg");
      if (!svg) return;
      var shrunk = svg.getBoundingClientRect().width < natural(svg) - 1;
      var scaled = shrunk || box.classList.contains("adx-full");
      box.classList.toggle("adx-scaled", scaled);
      if (scaled) {
        box.tabIndex = 0;
        box.setAttribute("title", box.classList.contains("adx-full")
          ? "click to fit the picture to the column" : "click to see the picture full size");
      }
    });
  }
  function markImages() {   // <img> pictures, linked to their file by book/_ext/pictures.py
    document.querySelectorAll("a.adx-full-size > img").forEach(function (img) {
      if (img.complete && img.naturalWidth)
        img.parentNode.classList.toggle("adx-shrunk", img.clientWidth < img.naturalWidth - 1);
    });
  }
  function toggle(box) {
    box.classList.toggle("adx-full");
    markPictures(box.parentNode);
    markScrollers();
  }
  document.addEventListener("click", function (e) {
    var box = e.target.closest && e.target.closest(".adx-fit.adx-scaled");
    if (box) toggle(box);
  });
  document.addEventListener("keydown", function (e) {
    var box = e.target.closest && e.target.closest(".adx-fit.adx-scaled");
    if (box && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); toggle(box); }
  });

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

  var pending = null;
  function refresh() {
    if (pending) return;
    pending = setTimeout(function () {
      pending = null;
      markPictures(document);
      markImages();
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
})();
