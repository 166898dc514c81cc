//! What a PDF attachment costs: its pages, at a fixed estimate each.
//!
//! The providers read a PDF as each page's text plus a picture of the page,
//! so its cost follows its pages, not its bytes. Counted as the text of its
//! base64, a 750 KB PDF came to about 680,000 tokens, over any window; a
//! text page is billed at about 2,300 tokens on Claude, a scanned one at
//! 1,600. So a page is taken at [`PDF_PAGE_TOKENS`], an estimate from
//! above like the images' fixed costs.
//!
//! Pages are found without parsing the file: each `/Type /Page` object, in
//! the file as written and inside its object streams (where PDF 1.5 and
//! later may keep them, Flate-compressed). Where an object stream cannot be
//! read (encrypted, another filter, damaged, or inflating past
//! [`MAX_INFLATED_BYTES`]) the pages are unknown: the file gives `None`, and
//! the caller counts the block as its text, over- rather than
//! under-counting. So does a file that is not a PDF, or has no page found.
//!
//! A page counts once per object number: an incremental update appends a
//! rewritten page as a new copy of its object (`12 0 obj`, or an entry of a
//! new object stream), and the copies are one page. The number is that of
//! the indirect object the entry is in (its `N G obj` header, no `endobj`
//! between) or, in an object stream, the object its offset falls in (the
//! stream's pairs of numbers and offsets, from `/First`). An entry whose
//! object is not known counts on its own.

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use flate2::{Decompress, FlushDecompress, Status};
use memchr::memmem;

/// Tokens a PDF page is taken to cost: above a dense text page on Claude
/// (about 2,300-2,500 tokens, text and picture), so a request with a PDF
/// stays within the window.
pub const PDF_PAGE_TOKENS: usize = 3_000;

/// The most bytes one file's object streams are inflated to, together: a
/// crafted stream that inflates without end costs this much, no more. A
/// stream that would pass it is left out (its pages are not counted).
pub const MAX_INFLATED_BYTES: usize = 64 << 20;

/// A PDF starts `%PDF-` within its first 1,024 bytes (readers allow junk before it).
const HEADER_WITHIN: usize = 1024;

/// Standard base64, padding optional, stray low bits after the last
/// character allowed (as Python's `base64.b64decode` allows them).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// The pages of a PDF given as base64, or as a `data:` URL whose header
/// ends `;base64` (and names `application/pdf`, if it names a type);
/// `None` where its pages are not known (see the module's notes).
pub fn pdf_pages_of(data: &str) -> Option<usize> {
    pdf_pages(&decode(payload(data)?)?)
}

/// The base64 of `data`: all of it, or what follows the comma of a data
/// URL whose header ends `;base64`, of no type or the PDF type.
fn payload(data: &str) -> Option<&str> {
    let Some(url) = data.strip_prefix("data:") else {
        return Some(data);
    };
    let (header, body) = url.split_once(',')?;
    let header = header.to_ascii_lowercase();
    let kind = header.split(';').next().unwrap_or_default();
    (header.ends_with(";base64") && (kind.is_empty() || kind == PDF_TYPE)).then_some(body)
}

/// The media type of a PDF.
pub const PDF_TYPE: &str = "application/pdf";

/// The bytes of standard base64, ASCII whitespace left out; `None` if it is not base64.
fn decode(text: &str) -> Option<Vec<u8>> {
    if text.bytes().any(|b| b.is_ascii_whitespace()) {
        let packed: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        return BASE64.decode(packed).ok();
    }
    BASE64.decode(text).ok()
}

/// The pages of a PDF's bytes: `None` if it is not a PDF, an object
/// stream cannot be read, or no page is found.
pub fn pdf_pages(bytes: &[u8]) -> Option<usize> {
    memmem::find(&bytes[..bytes.len().min(HEADER_WITHIN)], b"%PDF-")?;
    let mut pages = Pages::default();
    let spans = pages_in_object_streams(bytes, &mut pages)?;
    // The rest of the file, the streams' data left out: a stream stored
    // uncompressed (Flate level 0) shows its objects twice.
    let mut from = 0;
    for (start, end) in spans.into_iter().chain([(bytes.len(), bytes.len())]) {
        top_level_pages(&bytes[from..start], &mut pages);
        from = end;
    }
    let count = pages.count();
    (count > 0).then_some(count)
}

/// Pages found so far: the object numbers of the known ones (a number
/// found again is the same page) and how many others.
#[derive(Default)]
struct Pages {
    objects: std::collections::HashSet<u64>,
    unknown: usize,
}

impl Pages {
    fn add(&mut self, object: Option<u64>) {
        match object {
            Some(number) => {
                self.objects.insert(number);
            }
            None => self.unknown += 1,
        }
    }

    fn count(&self) -> usize {
        self.objects.len() + self.unknown
    }
}

/// The most digits an object number or offset is read with (more is not a number here).
const MOST_DIGITS: usize = 10;

/// The digits ending at `end`, if one to [`MOST_DIGITS`]: where they start, and their value.
fn digits_before(bytes: &[u8], end: usize) -> Option<(usize, u64)> {
    let start = bytes[..end]
        .iter()
        .rposition(|b| !b.is_ascii_digit())
        .map_or(0, |at| at + 1);
    (start < end && end - start <= MOST_DIGITS).then(|| {
        let value = bytes[start..end]
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        (start, value)
    })
}

/// Where the white space ending at `end` starts, if there is any.
fn white_before(bytes: &[u8], end: usize) -> Option<usize> {
    let start = bytes[..end]
        .iter()
        .rposition(|&b| !is_white(b))
        .map_or(0, |at| at + 1);
    (start < end).then_some(start)
}

/// The indirect objects' headers (`12 0 obj`) in `bytes`, in order: where
/// each header ends, and the object's number.
fn object_headers(bytes: &[u8]) -> Vec<(usize, u64)> {
    let mut headers = Vec::new();
    for at in memmem::find_iter(bytes, b"obj") {
        if !bytes.get(at + 3).is_none_or(|&b| ends_name(b)) {
            continue;
        }
        let header = white_before(bytes, at)
            .and_then(|end| digits_before(bytes, end))
            .and_then(|(generation, _)| white_before(bytes, generation))
            .and_then(|end| digits_before(bytes, end))
            .filter(|&(start, _)| start == 0 || ends_name(bytes[start - 1]));
        if let Some((_, number)) = header {
            headers.push((at + 3, number));
        }
    }
    headers
}

/// The pages of `bytes` outside the object streams, each known by the
/// object it is in: the last header before it, with no `endobj` between.
fn top_level_pages(bytes: &[u8], pages: &mut Pages) {
    let entries = page_entries(bytes);
    if entries.is_empty() {
        return;
    }
    let headers = object_headers(bytes);
    let ends: Vec<usize> = memmem::find_iter(bytes, b"endobj").collect();
    for at in entries {
        let before = headers.partition_point(|&(end, _)| end <= at);
        let object = before.checked_sub(1).and_then(|h| {
            let (end, number) = headers[h];
            // An `endobj` at or after the header's end, before the entry, closed it.
            let closed = ends.partition_point(|&e| e < end) < ends.partition_point(|&e| e < at);
            (!closed).then_some(number)
        });
        pages.add(object);
    }
}

/// PDF white space.
fn is_white(byte: u8) -> bool {
    matches!(byte, 0 | b'\t' | b'\n' | 0x0c | b'\r' | b' ')
}

/// Whether `byte` ends a PDF name (white space or a delimiter).
fn ends_name(byte: u8) -> bool {
    is_white(byte) || b"()<>[]{}/%".contains(&byte)
}

/// Where the name `name` (with its `/`) occurs whole in `bytes`.
fn names<'a>(bytes: &'a [u8], name: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    memmem::find_iter(bytes, name)
        .filter(move |&at| bytes.get(at + name.len()).is_none_or(|&b| ends_name(b)))
}

/// Where the `/Type /Page` entries in `bytes` are (not `/Type /Pages`, the page tree's).
fn page_entries(bytes: &[u8]) -> Vec<usize> {
    names(bytes, b"/Type")
        .filter(|&at| {
            let mut value = at + b"/Type".len();
            while bytes.get(value).is_some_and(|&b| is_white(b)) {
                value += 1;
            }
            bytes[value..].starts_with(b"/Page")
                && bytes
                    .get(value + b"/Page".len())
                    .is_none_or(|&b| ends_name(b))
        })
        .collect()
}

/// The pages inside the file's object streams (`/Type /ObjStm`), added to
/// `pages`, and where each stream's data lies (after the `stream` keyword
/// and its end of line, up to `endstream`). `None` where one does not
/// inflate whole within what the earlier ones left of [`MAX_INFLATED_BYTES`].
fn pages_in_object_streams(bytes: &[u8], pages: &mut Pages) -> Option<Vec<(usize, usize)>> {
    let mut left = MAX_INFLATED_BYTES;
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(found) = names(&bytes[from..], b"/ObjStm").next() {
        let after = from + found + b"/ObjStm".len();
        let Some(keyword) = memmem::find(&bytes[after..], b"stream") else {
            break;
        };
        let keyword = after + keyword;
        let mut start = keyword + b"stream".len();
        if bytes[start..].starts_with(b"\r\n") {
            start += 2;
        } else if bytes[start..].starts_with(b"\n") {
            start += 1;
        } else {
            from = start; // no stream's keyword: look further on
            continue;
        }
        let end = memmem::find(&bytes[start..], b"endstream").map_or(bytes.len(), |n| start + n);
        let objects = inflate(&bytes[start..end], left)?;
        left -= objects.len();
        // The stream's dictionary ends at its keyword: its `/First` is the last before it.
        let first = last_first(&bytes[from..keyword]);
        stream_pages(&objects, first, pages);
        spans.push((start, end));
        from = end;
    }
    Some(spans)
}

/// The value of the last `/First` entry in `bytes`, if it is a number.
fn last_first(bytes: &[u8]) -> Option<usize> {
    let at = names(bytes, b"/First").last()? + b"/First".len();
    let value = at + bytes[at..].iter().take_while(|&&b| is_white(b)).count();
    let digits = bytes[value..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let (_, number) = digits_before(bytes, value + digits)?;
    (bytes.get(value + digits).is_none_or(|&b| ends_name(b)) && digits > 0)
        .then(|| usize::try_from(number).ok())
        .flatten()
}

/// The pages of one object stream's data, each known by the object its
/// offset falls in: the stream starts with pairs of numbers (an object's
/// number, its offset from `first`), white space apart.
fn stream_pages(objects: &[u8], first: Option<usize>, pages: &mut Pages) {
    let entries = page_entries(objects);
    let mut offsets: Vec<(usize, u64)> = Vec::new();
    if let Some(first) = first.filter(|&f| f <= objects.len()) {
        let numbers: Option<Vec<u64>> = objects[..first]
            .split(|&b| is_white(b))
            .filter(|token| !token.is_empty())
            .map(|token| {
                digits_before(token, token.len())
                    .filter(|&(s, _)| s == 0)
                    .map(|(_, n)| n)
            })
            .collect();
        if let Some(numbers) = numbers.filter(|n| n.len() % 2 == 0) {
            offsets = numbers
                .chunks_exact(2)
                .filter_map(|pair| {
                    Some((first.checked_add(usize::try_from(pair[1]).ok()?)?, pair[0]))
                })
                .collect();
            offsets.sort_unstable();
        }
    }
    for at in entries {
        let before = offsets.partition_point(|&(start, _)| start <= at);
        pages.add(before.checked_sub(1).map(|o| offsets[o].1));
    }
}

/// `data` inflated (zlib), if it ends within `limit` bytes: a stream that is
/// damaged, cut short or longer than that gives `None`. What it holds at
/// once stays under `limit` plus a byte.
fn inflate(data: &[u8], limit: usize) -> Option<Vec<u8>> {
    // Room for one byte past the limit: a stream of exactly `limit` bytes
    // then reaches its end, a longer one shows it is longer.
    let room = limit.saturating_add(1);
    let mut stream = Decompress::new(true);
    let mut out = Vec::with_capacity(data.len().saturating_mul(4).clamp(1, room));
    loop {
        let (read, written) = (stream.total_in(), stream.total_out());
        let rest = &data[usize::try_from(read).ok()?..];
        let status = stream.decompress_vec(rest, &mut out, FlushDecompress::None);
        if out.len() > limit {
            return None;
        }
        match status {
            Ok(Status::StreamEnd) => return Some(out),
            Ok(_) => {}
            Err(_) => return None,
        }
        if out.len() == out.capacity() {
            out.reserve_exact((room - out.len()).min(out.len().max(4096)));
        } else if stream.total_in() == read && stream.total_out() == written {
            return None; // no progress with room left: the data is cut short
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::ZlibEncoder;
    use std::io::Write;

    fn deflated(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn pdf(body: &[u8]) -> Vec<u8> {
        [b"%PDF-1.7\n".as_slice(), body, b"\n%%EOF\n"].concat()
    }

    #[test]
    fn pages_are_page_objects_not_the_page_tree() {
        let body = b"1 0 obj <</Type /Pages /Count 2>> endobj\n\
                     2 0 obj <</Type/Page /Parent 1 0 R>> endobj\n\
                     3 0 obj <</Type\n/Page>> endobj\n4 0 obj <</Type /PageLabel>> endobj";
        assert_eq!(pdf_pages(&pdf(body)), Some(2));
        assert_eq!(pdf_pages(b"no header /Type /Page"), None);
        assert_eq!(pdf_pages(&pdf(b"1 0 obj <</Type /Pages>> endobj")), None);
    }

    #[test]
    fn pages_inside_object_streams_are_counted() {
        let objects = deflated(b"5 0 6 40 <</Type /Page>> <</Type /Page /Rotate 90>>");
        let mut body = b"7 0 obj <</Type /ObjStm /N 2 /Filter /FlateDecode>>\nstream\r\n".to_vec();
        body.extend_from_slice(&objects);
        body.extend_from_slice(b"\nendstream endobj 8 0 obj <</Type /Page>> endobj");
        assert_eq!(pdf_pages(&pdf(&body)), Some(3));
        // Damaged or cut short, the stream's pages are unknown, so the file's are.
        let cut = [
            &body[..body.len() / 2],
            b"\nendstream 9 0 obj <</Type /Page>>",
        ]
        .concat();
        assert_eq!(pdf_pages(&pdf(&cut)), None);
    }

    #[test]
    fn a_page_counts_once_per_object_number() {
        let first = b"2 0 obj <</Type /Page>> endobj\n3 0 obj <</Type /Page>> endobj\n";
        let update = b"2 0 obj <</Type /Page /Rotate 90>> endobj\n";
        assert_eq!(
            pdf_pages(&pdf(&[first.as_slice(), update].concat())),
            Some(2)
        );
        // Page 2 again, and page 4, in an object stream read by its pairs.
        let objects = deflated(b"2 0 4 16\n<</Type /Page>> <</Type /Page>>");
        let stream = [
            b"9 0 obj <</Type /ObjStm /N 2 /First 9 /Filter /FlateDecode>>\nstream\n".as_slice(),
            &objects,
            b"\nendstream endobj",
        ]
        .concat();
        assert_eq!(
            pdf_pages(&pdf(&[first.as_slice(), &stream].concat())),
            Some(3)
        );
        // After an endobj an entry is in no object: it counts on its own.
        assert_eq!(
            pdf_pages(&pdf(b"5 0 obj <<>> endobj <</Type /Page>> <</Type /Page>>")),
            Some(2)
        );
        // Numbers of more than ten digits are not read as numbers.
        let long = b"12345678901 0 obj <</Type /Page>> endobj 12345678901 0 obj <</Type /Page>>";
        assert_eq!(pdf_pages(&pdf(long)), Some(2));
    }

    #[test]
    fn a_stream_stored_uncompressed_counts_its_pages_once() {
        let mut stored = ZlibEncoder::new(Vec::new(), Compression::none());
        stored.write_all(b"5 0 <</Type /Page>>").unwrap();
        let body = [
            b"1 0 obj <</Type /ObjStm>>\nstream\n".as_slice(),
            &stored.finish().unwrap(),
            b"\nendstream endobj 2 0 obj <</Type /Page>> endobj",
        ]
        .concat();
        assert_eq!(pdf_pages(&pdf(&body)), Some(2));
    }

    #[test]
    fn a_stream_that_inflates_past_the_limit_is_left_out() {
        let big = deflated(&vec![b'a'; 10_000]);
        assert_eq!(inflate(&big, 10_000).map(|v| v.len()), Some(10_000));
        assert_eq!(inflate(&big, 9_999), None);
        assert_eq!(inflate(&big[..big.len() - 3], 20_000), None);
    }

    #[test]
    fn base64_and_data_urls() {
        let file = pdf(b"<</Type /Page>>");
        let text = BASE64.encode(&file);
        assert_eq!(pdf_pages_of(&text), Some(1));
        let url = format!("data:application/pdf;base64,{text}");
        assert_eq!(pdf_pages_of(&url), Some(1));
        assert_eq!(pdf_pages_of(&format!("data:;base64,{text}")), Some(1));
        assert_eq!(
            pdf_pages_of(&format!("data:text/plain;base64,{text}")),
            None
        );
        let wrapped: String = text
            .as_bytes()
            .chunks(8)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(pdf_pages_of(&wrapped), Some(1));
        assert_eq!(pdf_pages_of(text.trim_end_matches('=')), Some(1));
        assert_eq!(pdf_pages_of("data:application/pdf,%25PDF-"), None);
        assert_eq!(pdf_pages_of("not base64!"), None);
    }
}
