"""Click a table's header cell to sort its rows by that column (again to reverse): one small
inline script, no external file (`SORT_JS` its text, which the page's Content-Security-Policy
hashes; `SORT_SCRIPT` the element). Numbers sort as numbers (an interval by its lower end),
text as text, and cells without a value ("–", empty) last."""

SORT_JS = """
(function () {
  function key(cell) {
    var text = cell.innerText.trim().replace(/\\u2212/g, '-');
    var number = parseFloat(text);
    return isNaN(number) ? (text === '' || text === '\\u2013' ? null : text.toLowerCase()) : number;
  }
  function sort(table, column, th) {
    var rows = Array.prototype.slice.call(table.rows, 1);
    var down = th.getAttribute('aria-sort') === 'ascending';
    Array.prototype.forEach.call(table.rows[0].cells, function (c) { c.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', down ? 'descending' : 'ascending');
    rows.sort(function (r1, r2) {
      var a = key(r1.cells[column]), b = key(r2.cells[column]);
      if (a === null || b === null) { return a === b ? 0 : (a === null ? 1 : -1); }
      var order = (typeof a === typeof b) ? (a < b ? -1 : (a > b ? 1 : 0)) : (typeof a === 'number' ? -1 : 1);
      return down ? -order : order;
    });
    rows.forEach(function (row) { row.parentNode.appendChild(row); });
  }
  document.querySelectorAll('table.sortable, .sortable-all table').forEach(function (table) {
    if (!table.rows.length) { return; }
    Array.prototype.forEach.call(table.rows[0].cells, function (th, column) {
      th.style.cursor = 'pointer';
      th.title = 'sort by this column';
      th.addEventListener('click', function () { sort(table, column, th); });
    });
  });
})();
"""
SORT_SCRIPT = f"<script>{SORT_JS}</script>"
