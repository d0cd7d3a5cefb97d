"""Draws book/images/screenshot.png, the README's picture: Part 1's "Seeing
the stack" on a desktop (1280 px) beside the same place on a phone (390 px).

Needs a built book (`make book`), Debian's chromium and Pillow:
    .venv/bin/python scripts/readme_screenshot.py
"""
import io
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "_build" / "html" / "book" / "part1_interpreters.html"
OUT = ROOT / "book" / "images" / "screenshot.png"
VIEWS = [("desktop, 1280 px", 1280, 900), ("phone, 390 px", 390, 844)]
GAP, LABEL = 32, 28


def shoot(browser, width, height) -> Image.Image:
  page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
  page.goto(PAGE.as_uri() + "#seeing-the-stack", wait_until="load")
  page.wait_for_timeout(1500)
  page.evaluate("document.getElementById('seeing-the-stack').scrollIntoView()")
  page.wait_for_timeout(300)
  shot = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
  page.close()
  return shot


def main():
  with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    shots = [shoot(browser, w, h) for _, w, h in VIEWS]
    browser.close()
  width = sum(s.width for s in shots) + GAP * (len(shots) + 1)
  height = max(s.height for s in shots) + LABEL + 2 * GAP
  canvas = Image.new("RGB", (width, height), "#d9dde3")
  draw, x = ImageDraw.Draw(canvas), GAP
  font = ImageFont.load_default(size=22)
  for (label, _, _), shot in zip(VIEWS, shots):
    draw.text((x, GAP // 2), label, fill="#333333", font=font)
    canvas.paste(shot, (x, GAP + LABEL))
    draw.rectangle([x - 1, GAP + LABEL - 1, x + shot.width, GAP + LABEL + shot.height],
                   outline="#888888")
    x += shot.width + GAP
  canvas.save(OUT, optimize=True)
  print(f"wrote {OUT.relative_to(ROOT)} ({canvas.width}x{canvas.height})")


if __name__ == "__main__":
  main()
