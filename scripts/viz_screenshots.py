#!/usr/bin/env python3
"""Screenshots of the page of `attnlab viz RUN --serve` for docs/analysis.md, taken in headless
Chromium (Debian's chromium) driven over the DevTools protocol on a pipe, as a student would use
the page: the text is typed into the form (Input.insertText) and submitted, then a head is
clicked in the grid. Writes three PNGs into OUT_DIR: viz_serve_input.png (the form, the
prediction and every head of the layer), viz_serve_head.png (the enlarged head) and
viz_serve_heads.png (the table of every head measured on that input).

    /usr/bin/python3 scripts/viz_screenshots.py http://127.0.0.1:8000/ "TEXT" LAYER HEAD OUT_DIR

Standard library only. The server must be running (build/attnlab viz RUN --serve)."""
import base64
import json
import os
import subprocess
import sys
import tempfile
import time


class Chromium:
    def __init__(self, profile):
        commands_r, self.commands_w = os.pipe()
        self.replies_r, replies_w = os.pipe()

        def fds():  # the browser reads fd 3 and writes fd 4 (--remote-debugging-pipe)
            a, b = os.dup(commands_r), os.dup(replies_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
             "--window-size=1200,900", "--remote-debugging-pipe", "--user-data-dir=" + profile, "about:blank"],
            close_fds=False, preexec_fn=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(commands_r)
        os.close(replies_w)
        self.buffer, self.next_id = b"", 1
        page = [t for t in self.call("Target.getTargets", page=False)["targetInfos"] if t["type"] == "page"][0]
        self.session = self.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                                 page=False)["sessionId"]

    def call(self, method, params=None, page=True):
        i, self.next_id = self.next_id, self.next_id + 1
        message = {"id": i, "method": method, "params": params or {}}
        if page:
            message["sessionId"] = self.session
        os.write(self.commands_w, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" in self.buffer:
                text, self.buffer = self.buffer.split(b"\0", 1)
                reply = json.loads(text)
                if reply.get("id") == i:
                    if "error" in reply:
                        raise RuntimeError(method + ": " + json.dumps(reply["error"]))
                    return reply["result"]
            chunk = os.read(self.replies_r, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self.buffer += chunk

    def js(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(expression + ": " + json.dumps(r["exceptionDetails"]))
        return r["result"].get("value")

    def wait(self, condition, seconds=120):
        end = time.time() + seconds
        while time.time() < end:
            if self.js("(() => { try { return !!(" + condition + "); } catch (e) { return false; } })()"):
                return
            time.sleep(0.2)
        raise RuntimeError("timed out waiting for " + condition)

    def shot(self, path, selectors, pad=8):
        """A PNG of the smallest box around every element of `selectors` (page coordinates)."""
        box = self.js("(() => { const r = [%s].map((s) => document.querySelector(s).getBoundingClientRect());"
                      "return [Math.min(...r.map((b) => b.left)), Math.min(...r.map((b) => b.top)) + scrollY,"
                      "Math.max(...r.map((b) => b.right)), Math.max(...r.map((b) => b.bottom)) + scrollY]; })()"
                      % ",".join(json.dumps(s) for s in selectors))
        clip = {"x": max(0, box[0] - pad), "y": max(0, box[1] - pad), "width": box[2] - box[0] + 2 * pad,
                "height": box[3] - box[1] + 2 * pad, "scale": 1}
        data = self.call("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True})
        with open(path, "wb") as f:
            f.write(base64.b64decode(data["data"]))
        print("wrote", path, "(%d x %d)" % (clip["width"], clip["height"]))

    def close(self):
        try:
            self.call("Browser.close", page=False)
        except RuntimeError:
            pass
        self.proc.wait(timeout=20)


def main():
    url, text, layer, head, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        c = Chromium(profile)
        c.call("Emulation.setDeviceMetricsOverride", {"width": 1200, "height": 900, "deviceScaleFactor": 1,
                                                      "mobile": False})
        c.call("Page.navigate", {"url": url})
        c.wait("document.getElementById('status').dataset.cells > 0")
        c.js("document.getElementById('input').value = ''; document.getElementById('input').focus()")
        c.call("Input.insertText", {"text": text})
        c.js("document.getElementById('submit').click()")
        c.wait("document.getElementById('ask-status').textContent === 'answers: 1'")
        c.js("document.querySelector('button.layer[data-layer=\"%d\"]').click()" % layer)
        c.js("document.querySelector('#grids .cell[data-head=\"%d\"]').click()" % head)
        c.shot(os.path.join(out, "viz_serve_input.png"), ["h1", "#ask", "#prediction", "#grids"])
        c.shot(os.path.join(out, "viz_serve_head.png"), ["#focus"])
        c.shot(os.path.join(out, "viz_serve_heads.png"), ["#heads"])
        print("view:", c.js("location.href"))
        c.close()


if __name__ == "__main__":
    main()
