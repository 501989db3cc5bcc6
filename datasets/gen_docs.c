/*
 * gen_docs.c - the synthetic long documents of `k25 gold generate`:
 * contracts, financial reports and meeting notes.
 *
 * They are built to exercise what long-context serving cares about, not to
 * be read: contracts define terms in Article 1 and refer to them (with the
 * section number) dozens of pages later and end in appendix tables;
 * reports alternate prose with tables whose totals add up; meeting notes
 * are many short turns with little structure.  Everything is drawn from
 * the caller's RNG, so the same seed gives the same bytes.
 */
#include "gold_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define PICK(r, a) ((a)[k25_gold_rng_below((r), N(a))])

/* ------------------------------------------------------------ buffers */

void k25_gold_sbuf_put(struct k25_gold_sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap < b->n + n + 1)
            ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void k25_gold_sbuf_puts(struct k25_gold_sbuf *b, const char *s)
{
    k25_gold_sbuf_put(b, s, strlen(s));
}

void k25_gold_sbuf_printf(struct k25_gold_sbuf *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    k25_gold_sbuf_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* ------------------------------------------------------------ word banks */

static const char *const companies[] = {
    "Northwind Systems, Inc.",  "Helios Data Corporation", "Bluefin Analytics LLC",
    "Meridian Cloud Services",  "Arcadia Robotics GmbH",   "Quartz Ridge Holdings plc",
    "Tamarack Logistics Ltd.",  "Cobalt Health Partners",  "Sable Point Energy Co.",
    "Juniper Street Media SA",  "Kestrel Semiconductor",   "Oakmont Financial Group",
};
static const char *const states[] = {"Delaware", "New York", "California", "Texas", "Ontario",
                                     "England and Wales", "Bavaria", "Singapore"};
static const char *const months[] = {"January", "February", "March",     "April",   "May",      "June",
                                     "July",    "August",   "September", "October", "November", "December"};
static const char *const people[] = {"Alice", "Bram", "Chen", "Dana", "Emeka", "Farah", "Goran",
                                     "Hiro",  "Ines", "Jonas", "Kavya", "Luis", "Mara", "Nils"};

/* Defined terms of a contract: term, definition. */
static const char *const terms[][2] = {
    {"Affiliate", "any entity that directly or indirectly controls, is controlled by, or is under common "
                  "control with a party, where control means ownership of more than fifty percent of the "
                  "voting interests"},
    {"Confidential Information", "all non-public information disclosed by a party in any form that is "
                                 "marked confidential or that a reasonable person would understand to be "
                                 "confidential, excluding information that is or becomes public through no "
                                 "fault of the receiving party"},
    {"Deliverables", "the software, documentation, reports and other materials that Provider is required "
                     "to deliver under a Statement of Work"},
    {"Service Levels", "the availability, response-time and resolution-time commitments set out in "
                       "Appendix B"},
    {"Customer Data", "all data, including personal data, that Customer or its Users submit to the "
                      "Services, and all outputs derived from that data"},
    {"Fees", "the amounts payable by Customer as set out in Appendix A and each Statement of Work"},
    {"Force Majeure Event", "an event beyond the reasonable control of the affected party, including "
                            "flood, fire, earthquake, war, epidemic, labour dispute not involving that "
                            "party's employees, or failure of public utilities"},
    {"Intellectual Property Rights", "patents, copyrights, database rights, trade secrets, trademarks and "
                                     "all similar rights anywhere in the world, whether registered or not"},
    {"Statement of Work", "a document executed by both parties that describes specific services, "
                          "Deliverables, milestones and Fees and that references this Agreement"},
    {"Term", "the period beginning on the Effective Date and continuing for thirty-six (36) months, as "
             "extended under Article 3"},
    {"Users", "employees and contractors of Customer and its Affiliates whom Customer authorizes to use "
              "the Services"},
    {"Security Incident", "any unauthorized access to, or acquisition, disclosure or loss of, Customer "
                          "Data in the possession or control of Provider or its subprocessors"},
};

static const char *const article_titles[] = {
    "SERVICES",          "TERM AND RENEWAL",       "FEES AND PAYMENT",     "CONFIDENTIALITY",
    "DATA PROTECTION",   "SERVICE LEVELS",         "INTELLECTUAL PROPERTY", "WARRANTIES",
    "INDEMNIFICATION",   "LIMITATION OF LIABILITY", "TERMINATION",         "INSURANCE",
    "AUDIT RIGHTS",      "SUBCONTRACTING",         "FORCE MAJEURE",        "GOVERNING LAW AND DISPUTES",
    "CHANGE CONTROL",    "NOTICES",                "ASSIGNMENT",           "GENERAL PROVISIONS",
};

static const char *const obligations[] = {
    "provide the Services in a professional and workmanlike manner consistent with generally accepted "
    "industry standards",
    "notify the other party in writing within seventy-two (72) hours after becoming aware of the matter",
    "maintain complete and accurate records sufficient to verify compliance with this Article",
    "use commercially reasonable efforts to mitigate any resulting loss or delay",
    "not disclose the same to any third party except as expressly permitted by this Agreement",
    "pay all undisputed invoices within thirty (30) days of the invoice date",
    "implement and maintain administrative, physical and technical safeguards appropriate to the risk",
    "deliver a written remediation plan within ten (10) business days",
    "cooperate in good faith with any reasonable request of the other party",
    "return or destroy all copies within fifteen (15) days after the request, and certify the same in "
    "writing",
};

static const char *const conditions[] = {
    "Subject to the terms of this Agreement",
    "Except as otherwise provided in a Statement of Work",
    "Notwithstanding anything to the contrary in this Agreement",
    "During the Term and for two (2) years thereafter",
    "To the extent permitted by applicable law",
    "Upon written request of the other party",
    "Without limiting any other right or remedy",
};

/* ------------------------------------------------------------ contracts */

/* Appends one contract clause that cites a definition far from where it was made. */
static void legal_clause(struct k25_gold_rng *r, struct k25_gold_sbuf *b, int art, int sec)
{
    size_t t = k25_gold_rng_below(r, N(terms));
    const char *party = k25_gold_rng_below(r, 2) ? "Provider" : "Customer";
    k25_gold_sbuf_printf(b, "%d.%d %s, %s shall, with respect to any %s (as defined in Section 1.%zu), ",
                         art, sec, PICK(r, conditions), party, terms[t][0], t + 1);
    k25_gold_sbuf_printf(b, "%s.", PICK(r, obligations));
    switch (k25_gold_rng_below(r, 4)) {
    case 0:
        k25_gold_sbuf_printf(b, " Any failure to do so shall be a material breach for the purposes of "
                                "Section %d.%d.",
                             art > 2 ? (int)k25_gold_rng_below(r, (uint64_t)art - 2) + 2 : 2,
                             (int)k25_gold_rng_below(r, 4) + 1);
        break;
    case 1:
        k25_gold_sbuf_printf(b, " The obligations in this Section survive termination of this "
                                "Agreement for a period of %d years.",
                             (int)k25_gold_rng_below(r, 5) + 1);
        break;
    case 2:
        k25_gold_sbuf_printf(b, " The aggregate liability under this Section shall not exceed %s "
                                "times the Fees paid in the twelve (12) months preceding the claim.",
                             k25_gold_rng_below(r, 2) ? "two (2)" : "one (1)");
        break;
    default:
        break;
    }
    k25_gold_sbuf_puts(b, "\n");
}

/* Appendix table: fee schedule rows with computed totals. */
static void legal_appendix(struct k25_gold_rng *r, struct k25_gold_sbuf *b, int idx, size_t target)
{
    static const char *const items[] = {"Platform subscription", "Premium support", "Data egress (per TB)",
                                        "Professional services (per day)", "Training seat",
                                        "Dedicated environment", "Archive storage (per TB-month)",
                                        "Incident response retainer"};
    k25_gold_sbuf_printf(b, "\nAPPENDIX %c. FEE SCHEDULE (PART %d)\n\n", 'A' + (idx % 26), idx + 1);
    k25_gold_sbuf_puts(b, "| Ref | Item | Unit price (USD) | Quantity | Total (USD) |\n"
                          "|-----|------|-----------------:|---------:|------------:|\n");
    long long sum = 0;
    int rows = 6 + (int)k25_gold_rng_below(r, 10);
    for (int i = 0; i < rows && b->n < target + 256; i++) {
        long long price = 100 * (long long)(5 + k25_gold_rng_below(r, 400));
        long long qty = 1 + (long long)k25_gold_rng_below(r, 48);
        sum += price * qty;
        k25_gold_sbuf_printf(b, "| %c-%02d | %s | %lld.00 | %lld | %lld.00 |\n", 'A' + (idx % 26), i + 1,
                             PICK(r, items), price, qty, price * qty);
    }
    k25_gold_sbuf_printf(b, "| | **Total** | | | %lld.00 |\n", sum);
}

void k25_gold_gen_legal(struct k25_gold_rng *r, struct k25_gold_sbuf *b, size_t target)
{
    const char *prov = PICK(r, companies), *cust = PICK(r, companies);
    k25_gold_sbuf_printf(b,
                         "MASTER SERVICES AGREEMENT\n\nThis Master Services Agreement (the \"Agreement\") "
                         "is entered into as of %s %d, %d (the \"Effective Date\") by and between %s, a "
                         "company organized under the laws of %s (\"Provider\"), and %s, a company "
                         "organized under the laws of %s (\"Customer\").\n\n",
                         PICK(r, months), 1 + (int)k25_gold_rng_below(r, 28),
                         2019 + (int)k25_gold_rng_below(r, 6), prov, PICK(r, states), cust,
                         PICK(r, states));
    k25_gold_sbuf_puts(b, "ARTICLE 1. DEFINITIONS\n\n");
    for (size_t i = 0; i < N(terms); i++)
        k25_gold_sbuf_printf(b, "1.%zu \"%s\" means %s.\n", i + 1, terms[i][0], terms[i][1]);
    /* Articles until ~85% of the length, then appendix tables. */
    int art = 2;
    while (!b->oom && b->n < target - target / 7) {
        const char *title = article_titles[(size_t)(art - 2) % N(article_titles)];
        int round = (art - 2) / (int)N(article_titles);
        if (round)
            k25_gold_sbuf_printf(b, "\nARTICLE %d. %s (SUPPLEMENTAL TERMS %d)\n\n", art, title, round);
        else
            k25_gold_sbuf_printf(b, "\nARTICLE %d. %s\n\n", art, title);
        int secs = 3 + (int)k25_gold_rng_below(r, 5);
        for (int s = 1; s <= secs; s++)
            legal_clause(r, b, art, s);
        art++;
    }
    for (int a = 0; !b->oom && b->n < target; a++)
        legal_appendix(r, b, a, target);
}

/* -------------------------------------------------------------- finance */

static const char *const segments[] = {"Cloud Infrastructure", "Enterprise Software", "Devices",
                                       "Professional Services", "Payments", "Advertising"};
static const char *const drivers[] = {
    "higher subscription renewals in North America",
    "the ramp of two large enterprise contracts signed in the prior quarter",
    "favourable foreign exchange movements, partly offset by pricing pressure in Europe",
    "a one-time licence settlement recognized in the period",
    "lower component costs and improved data-centre utilization",
    "increased headcount in research and development",
    "restructuring charges related to the consolidation of two facilities",
};

/* A table of segment revenue over four quarters, with a computed total row. */
static void fin_table(struct k25_gold_rng *r, struct k25_gold_sbuf *b, int n, int year)
{
    k25_gold_sbuf_printf(b, "\nTable %d. Revenue by segment (in millions of USD)\n\n", n);
    k25_gold_sbuf_printf(b, "| Segment | Q1 FY%d | Q2 FY%d | Q3 FY%d | Q4 FY%d | FY%d |\n", year % 100,
                         year % 100, year % 100, year % 100, year % 100);
    k25_gold_sbuf_puts(b, "|---|---:|---:|---:|---:|---:|\n");
    long long col[5] = {0};
    size_t rows = 3 + k25_gold_rng_below(r, N(segments) - 2);
    size_t first = k25_gold_rng_below(r, N(segments));
    for (size_t i = 0; i < rows; i++) {
        long long q[4], y = 0;
        long long base = 200 + (long long)k25_gold_rng_below(r, 4000);
        for (int k = 0; k < 4; k++) {
            q[k] = base + (long long)k25_gold_rng_below(r, 400) - 150; /* tenths of millions */
            y += q[k];
            col[k] += q[k];
        }
        col[4] += y;
        k25_gold_sbuf_printf(b, "| %s | %lld.%lld | %lld.%lld | %lld.%lld | %lld.%lld | %lld.%lld |\n",
                             segments[(first + i) % N(segments)], q[0] / 10, q[0] % 10, q[1] / 10,
                             q[1] % 10, q[2] / 10, q[2] % 10, q[3] / 10, q[3] % 10, y / 10, y % 10);
    }
    k25_gold_sbuf_printf(b, "| Total | %lld.%lld | %lld.%lld | %lld.%lld | %lld.%lld | %lld.%lld |\n",
                         col[0] / 10, col[0] % 10, col[1] / 10, col[1] % 10, col[2] / 10, col[2] % 10,
                         col[3] / 10, col[3] % 10, col[4] / 10, col[4] % 10);
}

void k25_gold_gen_finance(struct k25_gold_rng *r, struct k25_gold_sbuf *b, size_t target)
{
    const char *co = PICK(r, companies);
    int year = 2018 + (int)k25_gold_rng_below(r, 7);
    int q = 1 + (int)k25_gold_rng_below(r, 4);
    k25_gold_sbuf_printf(b, "%s\nQuarterly Report for the fiscal quarter ended %s 30, %d (Q%d FY%d)\n\n",
                         co, months[(size_t)(q * 3 - 1)], year, q, year);
    int section = 1, table = 1;
    while (!b->oom && b->n < target) {
        k25_gold_sbuf_printf(b, "\n%d. %s\n\n", section,
                             section == 1 ? "Management's Discussion and Analysis"
                                          : segments[(size_t)section % N(segments)]);
        int paras = 2 + (int)k25_gold_rng_below(r, 3);
        for (int p = 0; p < paras; p++) {
            long long rev = 500 + (long long)k25_gold_rng_below(r, 20000);
            long long prev = rev - 200 + (long long)k25_gold_rng_below(r, 500);
            long long pct10 = prev ? (rev - prev) * 1000 / prev : 0;
            k25_gold_sbuf_printf(b,
                                 "Revenue in %s was $%lld.%lld million, %s of %lld.%lld%% compared with "
                                 "$%lld.%lld million in the prior-year period, driven primarily by %s. ",
                                 PICK(r, segments), rev / 10, rev % 10,
                                 pct10 >= 0 ? "an increase" : "a decrease",
                                 (pct10 < 0 ? -pct10 : pct10) / 10, (pct10 < 0 ? -pct10 : pct10) % 10,
                                 prev / 10, prev % 10, PICK(r, drivers));
            k25_gold_sbuf_printf(b,
                                 "Operating margin was %d.%d%%, and the segment ended the quarter with "
                                 "%d customers contributing more than $1 million in annualized revenue "
                                 "(see Table %d).\n\n",
                                 5 + (int)k25_gold_rng_below(r, 30), (int)k25_gold_rng_below(r, 10),
                                 20 + (int)k25_gold_rng_below(r, 900), table);
        }
        fin_table(r, b, table++, year);
        if (k25_gold_rng_below(r, 3) == 0)
            k25_gold_sbuf_printf(b, "\nNote %d. Figures are unaudited. Totals may not add up "
                                    "because of rounding of the quarterly amounts.\n",
                                 section);
        section++;
    }
}

/* -------------------------------------------------------------- minutes */

static const char *const topics[] = {"the Q3 roadmap",        "the on-call rotation",
                                     "the latency regression", "hiring for the platform team",
                                     "the customer escalation", "the data migration",
                                     "the budget review",     "the offsite agenda"};
static const char *const turns[] = {
    "quick update on %s, we're mostly on track",
    "I looked at %s yesterday, still not sure what's going on",
    "can we timebox %s to ten minutes?",
    "+1",
    "agree",
    "who owns %s now?",
    "I think that's blocked on legal",
    "let's take %s offline",
    "numbers look better than last week",
    "do we have a date for %s?",
    "I'll write it up after this call",
    "not from my side",
    "sorry, was on mute - yes, that works",
    "we should loop in finance on %s",
    "the dashboard for %s is broken again",
    "ok, moving on",
};

void k25_gold_gen_minutes(struct k25_gold_rng *r, struct k25_gold_sbuf *b, size_t target)
{
    size_t np = 3 + k25_gold_rng_below(r, 5);
    size_t p0 = k25_gold_rng_below(r, N(people));
    k25_gold_sbuf_printf(b, "meeting notes - weekly sync, %s %d\nattendees:", PICK(r, months),
                         1 + (int)k25_gold_rng_below(r, 28));
    for (size_t i = 0; i < np; i++)
        k25_gold_sbuf_printf(b, "%s %s", i ? "," : "", people[(p0 + i) % N(people)]);
    k25_gold_sbuf_puts(b, "\n\n");
    int minute = 0;
    while (!b->oom && b->n < target) {
        const char *topic = PICK(r, topics);
        if (k25_gold_rng_below(r, 3) == 0)
            k25_gold_sbuf_printf(b, "\n-- %s\n", topic);
        int n = 4 + (int)k25_gold_rng_below(r, 10);
        for (int t = 0; t < n; t++) {
            const char *who = people[(p0 + k25_gold_rng_below(r, np)) % N(people)];
            const char *fmt = PICK(r, turns);
            if (k25_gold_rng_below(r, 4) == 0)
                k25_gold_sbuf_printf(b, "[%02d:%02d] ", minute / 60, minute % 60);
            k25_gold_sbuf_printf(b, "%s: ", who);
            if (strstr(fmt, "%s"))
                k25_gold_sbuf_printf(b, fmt, topic); /* formats come from the table above */
            else
                k25_gold_sbuf_puts(b, fmt);
            k25_gold_sbuf_puts(b, "\n");
            minute += (int)k25_gold_rng_below(r, 3);
        }
        if (k25_gold_rng_below(r, 2) == 0)
            k25_gold_sbuf_printf(b, "ACTION: %s to follow up on %s by %s\n",
                                 people[(p0 + k25_gold_rng_below(r, np)) % N(people)], topic,
                                 PICK(r, months));
    }
}
