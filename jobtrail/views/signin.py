"""The sign-in page for an API token (when no OpenID Connect issuer is configured): a page
that says what it is for and where the person goes next, not a bare box. Styled by one
static stylesheet (`/ui/jobtrail.css`: the login pages' CSP allows `style-src 'self'`)."""

from __future__ import annotations

import html
import re

STYLESHEET = """
body { font: 15px/1.5 system-ui, sans-serif; color: #1d2329; background: #f5f6f8; margin: 0; }
main.signin { max-width: 26rem; margin: 12vh auto 0; background: #fff; padding: 1.5rem 2rem;
  border: 1px solid #d8dde2; border-radius: 8px; }
main.signin h1 { font-size: 1.35rem; margin: 0 0 .25rem; }
main.signin p { margin: .4rem 0; } p.going { color: #5b6670; }
label { display: block; font-size: .9rem; margin: 1rem 0 .25rem; }
input { font: inherit; width: 100%; box-sizing: border-box; padding: .45rem .5rem;
  border: 1px solid #c3cad1; border-radius: 4px; }
button { font: inherit; margin-top: 1rem; width: 100%; padding: .5rem; border-radius: 4px;
  border: 1px solid #0b5cad; background: #0b5cad; color: #fff; cursor: pointer; }
p.hint { font-size: .85rem; color: #5b6670; margin-top: 1rem; }
code { font: .9em ui-monospace, monospace; background: #eceff3; padding: 0 .2em; }
"""

_ACK = re.compile(r"^/v1/incidents/([^/?]+)/ack\?")
_PM = re.compile(r"^/incidents/([^/?]+)/postmortem")


def going(target: str) -> str:
    """Where the person goes after signing in, in words."""
    if m := _ACK.match(target):
        return f"Then you acknowledge incident {m[1]}, as yourself."
    if m := _PM.match(target):
        return f"Then you review the postmortem of incident {m[1]}."
    return "Then you go back to the page you asked for." if target != "/" else ""


def token_form(target: str) -> str:
    """The page's body: what jobtrail is, where they go next, the token field, where a token
    comes from."""
    esc = html.escape
    then = going(target)
    return (
        "<main class=\"signin\"><h1>Sign in to jobtrail</h1>"
        "<p>jobtrail records who acknowledges, resolves and reviews: sign in so it records "
        "you.</p>"
        + (f"<p class=\"going\" id=\"going\">{esc(then)}</p>" if then else "")
        + "<form method=\"post\" action=\"/ui/login\">"
        "<label for=\"token\">Your API token</label>"
        "<input id=\"token\" name=\"token\" type=\"password\" required autocomplete=\"off\" "
        "autofocus>"
        f"<input type=\"hidden\" name=\"next\" value=\"{esc(target, quote=True)}\">"
        "<button>Sign in</button></form>"
        "<p class=\"hint\">A token names you (<code>user:NAME</code>), your projects and your "
        "role; your jobtrail operator gives you one. The browser keeps a session cookie, not "
        "the token.</p></main>")
